"""The built-in corpus (package ``diageval.corpus``): YAML cases and the taxonomy, shipped as package data.

Nothing but data lives here; this file only makes the folder a package so that an installed diageval
finds its corpus through ``importlib.resources`` (see ``diageval.paths``).
"""

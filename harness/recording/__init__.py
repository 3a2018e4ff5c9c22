"""Live recording of a case into an evidence bundle.

``record_case`` (in :mod:`diageval.recording.record`) is the entry point; :mod:`.launcher` starts and
watches the rank processes, :mod:`.rank_worker` is what each rank runs, :mod:`.bundle_writer`
assembles the folder, :mod:`.metrics` samples host metrics while the ranks run. Importing this package
does not import torch.
"""

"""Cases: the labeled-case model, the taxonomy, and loading and checking case files (first room of the flow)."""

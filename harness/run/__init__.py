"""Running diagnosers: the pipeline, the run folder (one typed reader and writer), hosting (registry,
worker, command runner, the labels hand-over to the harness's own reference diagnosers) and grading."""

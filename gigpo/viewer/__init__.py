"""`gigpo view`: rollout records written by the trainer (record_files.py), and a browser viewer for them
(run.py reads a run directory, app.py serves or exports the page in static/)."""

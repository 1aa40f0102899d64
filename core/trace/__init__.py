"""The trace: the event log on disk, its CSV export and readers, autosave, the Chrome trace (torch-free)."""

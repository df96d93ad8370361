"""One run executed: the run folder, its log and lock, the summary."""

"""Training a target in time-limited pieces: the state file, bundles, GPU sessions."""

"""A run on disk: its files, directory, provenance, metrics and seeds."""

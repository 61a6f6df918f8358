"""One folder per paper; each registers itself (shared/papers.py)."""

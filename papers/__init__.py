"""One folder per paper; each registers itself (shared/methods/papers.py)."""

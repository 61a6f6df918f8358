"""One folder per paper; each registers itself (shared/targets/papers.py)."""

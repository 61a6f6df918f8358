"""The core of the package (README: Layout)."""

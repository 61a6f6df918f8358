"""The papers' models (nets.py) and the registry that builds one by name (registry.py)."""

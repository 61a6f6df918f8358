"""The run config tree: its schema and dotted keys."""

"""The run config tree: its schema, dotted keys and runtime settings."""

"""The core: the commands people type, beside packages by concern (docs/layout.md)."""

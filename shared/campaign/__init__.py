"""A campaign: a target's runs trained across time-limited sessions on any machine, its state
file carried from one session to the next (docs/gpu-sessions.md)."""

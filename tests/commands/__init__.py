"""Tests of python -m shared.run, plan, curves, archive."""

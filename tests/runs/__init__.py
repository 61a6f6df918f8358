"""Tests of a run on disk: resuming, recovery."""

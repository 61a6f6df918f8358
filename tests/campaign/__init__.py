"""Tests of time-limited GPU sessions and their state files."""

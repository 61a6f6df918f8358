"""Tests of the papers' declarations and the runs they need."""

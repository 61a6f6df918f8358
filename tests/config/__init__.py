"""Tests of the run config: keys, values, ids, refusals."""

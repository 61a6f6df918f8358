"""Tests of datasets and partitions."""

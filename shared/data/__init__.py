"""Datasets, their catalog, partitions across clients and each run's federation."""

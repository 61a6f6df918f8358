"""Tests of FedAvg, the baselines and the papers' methods."""

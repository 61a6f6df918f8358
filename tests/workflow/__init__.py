"""Tests of Snakemake, SLURM, the report, start-up."""

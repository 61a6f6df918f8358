"""Tests of Snakemake, SLURM, the report, start-up."""

import pytest


def require_snakemake() -> None:
    """Skip where Snakemake is not installed: the workflow is an extra (requirements-workflow.txt),
    and a GPU node with torch, pandas and PyYAML alone runs the runs, the campaign and their tests."""
    pytest.importorskip("snakemake", reason="Snakemake is not installed (pip install -r requirements-workflow.txt)")

"""Tests of tables, LaTeX, claims, figures."""

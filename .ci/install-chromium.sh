#!/usr/bin/env bash
# Headless Chromium for the `browser` tests (tests/workflow/test_report.py opens the Snakemake report in
# it, dumps the rendered page and takes a screenshot): Debian's chromium, and DejaVu fonts so
# that text, ✓ and ✗ render.
exec bash "$(dirname "$0")/apt-install.sh" chromium chromium fonts-dejavu-core

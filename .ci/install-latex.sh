#!/usr/bin/env bash
# LaTeX for the `latex` tests (tests/reporting/test_latex.py compiles every table.tex with pdflatex; the
# tables need booktabs and graphicx): Debian's texlive-latex-base and -recommended.
exec bash "$(dirname "$0")/apt-install.sh" pdflatex texlive-latex-base texlive-latex-recommended

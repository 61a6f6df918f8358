"""Papers register themselves: every package under `papers/` that holds a `tables.py` is a paper.

    papers/<name>/__init__.py   METHODS: config name -> "module:Class", relative to the package
    papers/<name>/tables.py     TABLES, FIGURES and SEARCHES: the paper's targets, as data

Nothing in `shared/` names a paper. A folder dropped in with these two files adds its methods
(`method.name=...`), its tables, figures and searches, and its Snakemake targets
(`papers/<name>/<table>`, `<name>`, `<name>_searches`); reading the registry imports only the
packages' `__init__.py`, so listing or validating methods loads no training code.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from shared.config.schema import ConfigError

PACKAGE = "papers"


@cache
def paper_names() -> tuple[str, ...]:
    """The papers found under papers/, in alphabetical order."""
    package = importlib.import_module(PACKAGE)
    return tuple(
        sorted(
            info.name
            for folder in package.__path__
            for info in pkgutil.iter_modules([folder])
            if info.ispkg and (Path(folder) / info.name / "tables.py").is_file()
        )
    )


def check_paper(paper: str) -> None:
    if paper not in paper_names():
        raise ConfigError(f"paper {paper!r} is unknown; valid: {list(paper_names())}")


def paper_tables_module(paper: str):
    """papers/<paper>/tables.py, which declares TABLES, FIGURES and SEARCHES."""
    check_paper(paper)
    return importlib.import_module(f"{PACKAGE}.{paper}.tables")


def display_name(paper: str) -> str:
    """The paper's name as its own folder spells it (`NAME` in papers/<paper>/__init__.py)."""
    return getattr(importlib.import_module(f"{PACKAGE}.{paper}"), "NAME", paper)


@cache
def paper_methods() -> dict[str, str]:
    """Every paper's methods: config name -> absolute "module:Class" import path."""
    methods: dict[str, str] = {}
    for paper in paper_names():
        package = f"{PACKAGE}.{paper}"
        for name, target in getattr(importlib.import_module(package), "METHODS", {}).items():
            if name in methods:
                raise ValueError(f"method {name!r} is registered by two papers ({methods[name]} and {package})")
            module, cls = target.split(":")
            methods[name] = f"{package}{module}:{cls}" if module.startswith(".") else target
    return methods

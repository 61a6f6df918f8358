"""One declaration of the dependencies: pyproject.toml's, with its extras. requirements*.txt
mirror it for `pip install -r`, environment.yml declares the same ranges for conda on the Python
the lock was frozen on, and requirements.lock pins every package any of them names."""

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# what each requirements file mirrors: pyproject's own dependencies ("core") and its extras
MIRRORS = {
    "requirements.txt": ["core", "test"],
    "requirements-workflow.txt": ["workflow"],
    "requirements-text.txt": ["text"],
    "requirements-tensorboard.txt": ["tensorboard"],
}
CONDA_NAMES = {"pytorch": "torch"}


def split(requirement: str) -> tuple[str, str]:
    """("numpy", ">=1.26") from "numpy>=1.26", the name normalised as pip compares names."""
    name, spec = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.*?)\s*", requirement).groups()
    return re.sub(r"[-_.]+", "-", name).lower(), spec


def declared() -> dict[str, dict[str, str]]:
    """pyproject.toml's groups: "core" (project.dependencies) and each extra, name -> range."""
    text = (ROOT / "pyproject.toml").read_text()
    groups = {"core": re.search(r"^dependencies = (\[.*?\])", text, re.M | re.S).group(1)}
    extras = text.split("[project.optional-dependencies]\n")[1].split("\n[")[0]
    groups.update(re.findall(r"^(\w+) = (\[.*?\])", extras, re.M))
    return {group: dict(map(split, ast.literal_eval(items))) for group, items in groups.items()}


def requirement_file(name: str) -> dict[str, str]:
    lines = [line.split("#")[0] for line in (ROOT / name).read_text().splitlines()]
    return dict(split(line) for line in lines if line.strip())


def test_requirements_files_mirror_pyproject():
    groups = declared()
    for name, mirrored in MIRRORS.items():
        assert requirement_file(name) == {k: v for g in mirrored for k, v in groups[g].items()}, name
    assert set(groups) == {g for mirrored in MIRRORS.values() for g in mirrored}  # no extra unmirrored


def test_environment_yml_declares_pyproject_ranges_on_the_locks_python():
    groups = declared()
    entries = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    python = next(e for e in entries if e.startswith("python="))
    conda = dict(split(e.split("=*")[0]) for e in entries if e != python)
    conda = {CONDA_NAMES.get(name, name): spec for name, spec in conda.items()}
    assert conda == {**groups["core"], **groups["test"], **groups["workflow"]}
    lock_python = re.search(r"\(Python (3\.\d+)", (ROOT / "requirements.lock").read_text()).group(1)
    assert python == f"python={lock_python}"
    assert f"LOCK_PYTHON={lock_python}" in (ROOT / "scripts" / "setup.sh").read_text()


def test_the_lock_pins_every_declared_package_but_torch():
    locked = {
        split(line.split("==")[0])[0] for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line
    }
    named = {name for group in declared().values() for name in group}
    assert named - locked == {"torch"}  # torch's build is scripts/setup.sh's choice

"""One declaration of the dependencies: pyproject.toml's, with its extras. requirements*.txt are
generated from it (scripts/requirements.py) for `pip install -r`, environment.yml declares the same
ranges for conda on the Python the lock was frozen on, and requirements.lock pins every package any
of them names."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}


def requirements_script():
    spec = importlib.util.spec_from_file_location("requirements_script", ROOT / "scripts" / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split(requirement: str) -> tuple[str, str]:
    """("numpy", ">=1.26") from "numpy>=1.26", the name normalised as pip compares names."""
    name, spec = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.*?)\s*", requirement).groups()
    return re.sub(r"[-_.]+", "-", name).lower(), spec


def declared() -> dict[str, dict[str, str]]:
    """pyproject.toml's groups: "core" (project.dependencies) and each extra, name -> range."""
    return {group: dict(map(split, items)) for group, items in requirements_script().declared().items()}


def test_requirements_files_are_generated_from_pyproject():
    script = requirements_script()
    for name, text in script.generated().items():
        assert (ROOT / name).read_text() == text, f"{name}: run python scripts/requirements.py"
    # every group of pyproject.toml is in a file, and no requirements file is written by hand
    assert {g for parts, _ in script.FILES.values() for g in parts} == set(declared())
    assert {p.name for p in ROOT.glob("requirements*.txt")} == set(script.FILES)


def test_requirements_check_names_a_stale_file(tmp_path):
    for name in ["scripts/requirements.py", "pyproject.toml", *requirements_script().FILES]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    check = [sys.executable, "scripts/requirements.py", "--check"]
    assert subprocess.run(check, cwd=tmp_path).returncode == 0
    with open(tmp_path / "requirements-text.txt", "a") as f:
        f.write("tqdm\n")  # a requirement added by hand
    proc = subprocess.run(check, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.split()[0] == "requirements-text.txt"
    subprocess.run(check[:-1], cwd=tmp_path, check=True, capture_output=True)
    assert subprocess.run(check, cwd=tmp_path).returncode == 0


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
    # and that Python is one pyproject.toml allows
    floor = re.search(r'^requires-python = ">=3\.(\d+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert int(lock_python.split(".")[1]) >= int(floor)


def test_the_lock_pins_every_declared_package_but_torch():
    locked = {
        split(line.split("==")[0])[0] for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line
    }
    named = {name for group in declared().values() for name in group}
    assert named - locked == {"torch"}  # torch's build is scripts/setup.sh's choice


def test_the_locked_versions_are_in_the_declared_ranges():
    from packaging.specifiers import SpecifierSet

    lines = [line.split("==") for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line]
    pins = {split(name)[0]: version.strip() for name, version in lines}
    for group, ranges in declared().items():
        for name, spec in ranges.items():
            if name != "torch":
                assert SpecifierSet(spec).contains(pins[name]), f"{group}: {name} {spec}, locked {pins[name]}"


# pandas methods that import a package pandas does not depend on, none of which we declare
PANDAS_OPTIONAL = {
    "to_markdown": "tabulate",
    "to_excel": "openpyxl",
    "read_excel": "openpyxl",
    "to_parquet": "pyarrow",
    "read_parquet": "pyarrow",
    "read_html": "lxml",
    "to_xml": "lxml",
}


def test_no_code_calls_a_pandas_method_whose_package_is_not_declared():
    """Where the workflow's Snakemake is installed, its dependencies (tabulate among them) hide a
    missing one; a GPU node with torch, pandas and PyYAML alone would fail."""
    named = {name for group in declared().values() for name in group}
    calls = [
        f"{path.relative_to(ROOT)}: .{method}() needs {package}"
        for folder in ["shared", "papers", "benchmarks", "scripts", "workflow"]
        for path in (ROOT / folder).rglob("*.py")
        for method, package in PANDAS_OPTIONAL.items()
        if package not in named and f".{method}(" in path.read_text(encoding="utf-8")
    ]
    assert calls == []

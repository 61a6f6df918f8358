"""The house rules a newcomer relies on to find their way: shared/ holds the commands people type
beside packages by concern, the packages form floors (a module imports only its own package or one
below it, so no cycle can form), and no module or function grows past a screenful or two."""

import ast
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT / "shared"
FLOORS = ["config", "runs", "data", "models", "methods", "targets", "training", "reporting", "campaign"]
# python -m shared.X; shared.campaign is a package
COMMANDS = {"run", "workflow_job", "probe_job", "partition_job", "plan", "curves", "archive"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def modules():
    return sorted(SHARED.rglob("*.py"))


def floor(module: str) -> int:
    """A module's floor by its top-level name under shared (the commands above every package)."""
    top = module.split(".")[1] if module.count(".") else module
    return FLOORS.index(top) if top in FLOORS else len(FLOORS)


def project_imports(path: Path):
    """Every `shared.X` this file imports, at the top or inside a function; imports under
    `if TYPE_CHECKING:` are annotations only and load nothing."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in node.body
        for n in ast.walk(child)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shared"):
            yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names if a.name.startswith("shared"))


def test_the_top_of_shared_holds_only_the_commands_beside_the_packages():
    files = {p.stem for p in SHARED.glob("*.py")} - {"__init__"}
    packages = {p.name for p in SHARED.iterdir() if (p / "__init__.py").exists()}
    assert files == COMMANDS
    assert packages == set(FLOORS)
    assert (SHARED / "campaign" / "__main__.py").exists()


def test_no_module_imports_a_package_above_its_own():
    climbing = []
    for path in modules():
        own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for imported, line in project_imports(path):
            if imported != "shared" and floor(imported) > floor(own):
                climbing.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not climbing, "\n".join(climbing)


def test_no_module_or_function_is_longer_than_the_house_allows():
    long_modules, long_functions = [], []
    for path in [*modules(), *sorted((ROOT / "papers").rglob("*.py"))]:
        name, text = str(path.relative_to(ROOT)), path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not long_modules and not long_functions, "\n".join(long_modules + long_functions)


def test_docs_layout_names_every_module():
    """docs/layout.md is the map a newcomer reads first: a module it does not name is lost."""
    listing = (ROOT / "docs" / "layout.md").read_text()
    unnamed = [str(p.relative_to(ROOT)) for p in modules() if p.name != "__init__.py" and p.name not in listing]
    assert not unnamed, f"docs/layout.md does not name {unnamed}"


def test_every_tracked_link_stays_inside_the_checkout():
    """A symbolic link to a path of one machine dangles in every other clone (and a tracked
    `data` link to one broke the default data root there)."""
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000 ")]
    outside = [
        link
        for link in links
        if Path(os.readlink(ROOT / link)).is_absolute() or ROOT not in (ROOT / link).resolve().parents
    ]
    assert not outside, f"tracked links that leave the checkout: {outside}"

"""Every Snakemake process (each SLURM job's too) runs the Snakefile and its rules' top-level
imports before it does anything: they must load neither torch nor pandas (seconds)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_workflows_top_level_imports_load_neither_torch_nor_pandas():
    sources = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    modules = sorted(
        {m for path in sources for m in re.findall(r"^from (shared(?:\.\w+)+) import", path.read_text(), re.M)}
    )
    assert "shared.targets.cost" in modules and len(modules) >= 5  # runs.smk's and common.smk's top-level imports
    code = f"import sys; import {', '.join(modules)}; print(sorted({{'torch', 'pandas'}} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    assert loaded.strip() == "[]", f"{modules} load {loaded.strip()}"

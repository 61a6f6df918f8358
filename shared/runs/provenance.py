"""Where and with what an output (a run, a table, a figure) was made: the git commit and whether
the tree was dirty, Python, the platform, the versions of the packages that shape the numbers,
and the CUDA, cuDNN and GPU driver versions. Standard library only; torch is consulted only if
it is already imported (a run) or importable (`environment(torch=True)`), so that a table
build or `python -m shared.plan` does not pay for importing it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "torch",
    "torchvision",
    "numpy",
    "pandas",
    "matplotlib",
    "seaborn",
    "pyyaml",
    "transformers",
    "snakemake",
    "snakemake-executor-plugin-slurm",
)
REPO = Path(__file__).resolve().parents[2]
# "<sha>" or "<sha>-dirty": the commit a checkout copied without its .git was made from (a GPU
# session's bundle records it, shared/campaign/bundle.py), read where git finds none
SOURCE_ENV = "FEDREPRO_SOURCE_COMMIT"


def _git(*args: str, repo: Path = REPO) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_state(repo: Path = REPO) -> dict:
    """{"commit": sha or None, "dirty": tracked files differ from the commit (None if unknown)}.
    Tracked results (results/shipped/, results/campaign/) are outputs, not code: a campaign
    rewrites its state while it trains, which says nothing about the code that made a run."""
    commit = _git("rev-parse", "HEAD", repo=repo)
    if commit is None:
        return carried_commit()
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results", repo=repo)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def carried_commit() -> dict:
    """git_state's record of SOURCE_ENV: a commit of 40 hexadecimal digits, else none."""
    value = os.environ.get(SOURCE_ENV, "")
    sha = value.removesuffix("-dirty")
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        return {"commit": None, "dirty": None}
    return {"commit": sha, "dirty": value.endswith("-dirty")}


def git_commit(repo: Path = REPO) -> str:
    """The commit as one string: "<sha>", "<sha>-dirty" or "unknown"."""
    state = git_state(repo)
    if state["commit"] is None:
        return "unknown"
    return state["commit"] + ("-dirty" if state["dirty"] else "")


def package_versions(packages=PACKAGES) -> dict[str, str | None]:
    """Installed versions read from the packages' metadata (nothing is imported)."""
    versions = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


@cache
def gpu_driver() -> str | None:
    """The NVIDIA driver version from nvidia-smi (None without one)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    versions = sorted({line.strip() for line in proc.stdout.splitlines() if line.strip()})
    return ",".join(versions) if proc.returncode == 0 and versions else None


def cuda_versions(import_torch: bool = False) -> dict:
    """torch's CUDA and cuDNN versions (None on a CPU build, or when torch is not loaded and
    `import_torch` is false) and the GPU driver."""
    torch = sys.modules.get("torch")
    if torch is None and import_torch:
        try:
            import torch  # noqa: F811
        except ImportError:
            torch = None
    cuda = cudnn = None
    if torch is not None:
        cuda = getattr(torch.version, "cuda", None)
        try:
            cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        except Exception:  # a CPU build without cuDNN, or a broken install
            cudnn = None
    return {"cuda": cuda, "cudnn": cudnn, "gpu_driver": gpu_driver()}


def numerics() -> dict | None:
    """How torch computes in this process (shared.runs.numerics.set_numerics sets it): deterministic
    kernels, cuDNN's benchmarking, TF32, cuBLAS's workspace; None when torch is not loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


def environment(torch: bool = True) -> dict:
    """Everything a run or an output records about where it was made:

    {"git_commit", "git_dirty", "python", "platform", "hostname", "packages": {name: version},
     "cuda", "cudnn", "gpu_driver", "numerics"}

    With `torch=True` (a run's metrics.json) torch is imported if it is not yet; with
    `torch=False` its versions are read only if something imported it already."""
    git = git_state()
    return {
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "packages": package_versions(),
        **cuda_versions(import_torch=torch),
        "numerics": numerics(),
    }


def provenance_header(scale: str) -> dict:
    """Where and with what an output was made (package versions read from their metadata,
    so that nothing is imported)."""
    env = environment(torch=False)
    return {
        "scale": scale,
        "git_commit": git_commit(),
        "python": env["python"],
        "platform": env["platform"],
        "packages": env["packages"],
        "cuda": env["cuda"],
        "cudnn": env["cudnn"],
        "gpu_driver": env["gpu_driver"],
    }


def commits_of(environments: list[dict | None]) -> dict:
    """What several runs' `environment` records say about the code they ran: the distinct
    commits (a dirty tree as "<sha>-dirty", a run without a record as "unknown") and whether
    there is more than one, for a table's provenance.yaml."""
    commits = set()
    for env in environments:
        if not env or not env.get("git_commit"):
            commits.add("unknown")
        else:
            commits.add(env["git_commit"] + ("-dirty" if env.get("git_dirty") else ""))
    return {"run_commits": sorted(commits), "mixed_commits": len(commits) > 1}

"""The README's path for a newcomer and a reviewer, as written: "Try it first" builds a smoke table,
"For reviewers" writes the HTML report of what it built. The commands are read from README.md and
run as written in a copy of the project, so that the test fails when the page's commands stop
working. Training every run of the table would take minutes: all of its runs but one are written
as finished runs write them, and the build trains the one left, then builds the table."""

import json
import re
import shlex
from pathlib import Path

from shared.targets.table_declarations import expand, get_table
from tests.workflow.test_workflow import make_project, snakemake

ROOT = Path(__file__).resolve().parents[2]


def section_commands(title: str) -> list[list[str]]:
    """The Snakemake commands in the README's code lines under `## <title>`, as argument lists
    after the executable (`scripts/setup.sh && ` before it, as "Try it first" has, left out)."""
    text = (ROOT / "README.md").read_text()
    section = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S).group(1)
    commands = []
    for line in section.splitlines():
        if line.startswith("    ") and "snakemake" in line:
            words = shlex.split(line.split("&&")[-1].split("#")[0])
            assert words[0] == ".venv/bin/snakemake", line  # the venv scripts/setup.sh makes
            commands.append(words[1:])
    return commands


def target_of(args: list[str]) -> str:
    return args[args.index("--") + 1]


def write_finished_runs(project: Path, run_ids: list[str]) -> None:
    """metrics.json of finished runs, as shared.run writes them (4 rounds, the smoke scale's)."""
    for i, run_id in enumerate(run_ids):
        accs = [20.0 + 10 * r + i % 7 for r in range(4)]
        out = project / "results" / "runs" / run_id
        out.mkdir(parents=True)
        summary = {
            "status": "completed",
            "run_id": run_id,
            "rounds_completed": 4,
            "eval_rounds": [1, 2, 3, 4],
            "global_acc": accs,
            "local_acc": [a - 4 for a in accs],
            "global_loss": [1.0] * 4,
            "final_acc": accs[-1],
            "best_acc": max(accs),
            "wall_time_s": 5.0,
            "device": "cpu",
            "device_name": "test",
        }
        (out / "metrics.json").write_text(json.dumps(summary))


def test_readme_reviewer_path_builds_then_reports(tmp_path):
    (build,) = section_commands("Try it first: the smoke table on a laptop")
    (report,) = section_commands("For reviewers")
    assert "--report" in report and "--report" not in build
    # the report names what "Try it first" built, at the same scale: a report builds nothing
    assert target_of(report) == target_of(build)
    config = build[build.index("--config") + 1 : build.index("--")]
    assert "scale=smoke" in config
    assert report[report.index("--config") + 1 : report.index("--report")] == config

    project = make_project(tmp_path / "project")
    _, paper, name = target_of(build).split("/")
    run_ids = sorted({cell.run_id for cell in expand(get_table(paper, name), "smoke")})
    write_finished_runs(project, run_ids[1:])
    for args in (build, report):
        proc = snakemake(project, *args)
        assert proc.returncode == 0, shlex.join(args) + "\n" + proc.stderr[-3000:]
    assert json.loads((project / "results" / "runs" / run_ids[0] / "metrics.json").read_text())["status"] == "completed"
    assert (project / "results" / "smoke" / paper / name / "table.csv").exists()
    html = (project / "report.html").read_text()
    assert name in html and "smoke" in html

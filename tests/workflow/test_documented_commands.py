"""Every command of the user's pages works as written, in the order the page gives it: README.md,
docs/*.md, papers/*/README.md and benchmarks/README.md. The commands are read from the pages themselves, from their code
blocks (indented or fenced) and from the inline `code` that starts with a command, and each is
checked cheaply but for real:

- `python -m <module> ...`: the module's own argument parser (its `parser()`, `argument_parser()`
  or `parse_args()`) parses the documented arguments, so that every flag, subcommand and choice
  exists; then what costs nothing: the targets resolve, the key=value overrides make a config,
  a session's limits are accepted;
- `snakemake ...`: Snakemake's own parser takes the arguments, every `--config` key is one of
  workflow/schemas/config.schema.yaml (and its value one the schema allows), the profile exists;
  then every target is planned by `snakemake -n` in a copy of the project, one dry run per
  profile and --config (test_snakemake_targets_plan_as_documented);
- `scripts/*.sh`: it exists, is executable and takes the documented arguments (setup.sh's
  `--dry-run` parses them and stops; gpu-session.sh hands its own to the
  parser of `shared.campaign.session`);
- `pip ...`: pip's own parser takes the options; the requirement files and extras named exist;
- the files and folders a command names exist in the checkout, or an earlier command on the page
  makes them (or the page says where they come from: PRODUCED_ELSEWHERE).

A command that cannot be checked this way is in UNCHECKED with the reason (a Snakemake command
that cannot be dry-run here, in NOT_PLANNED); a command that no checker knows and that UNCHECKED
does not name fails the test, so nothing is skipped silently.
Values a reader fills in (`<paper>`, `OUT`, `M`, `[--option]`) are given the values of
PLACEHOLDERS; the shell's own substitutions ($(nproc)) those of SHELL."""

import contextlib
import importlib
import io
import os
import pickle
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import yaml

from shared.targets.papers import paper_names
from shared.targets.resolve import command_targets, paper_target_names
from tests.workflow import require_snakemake
from tests.workflow.test_workflow import make_project

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
PAGES += sorted(f"papers/{p.parent.name}/README.md" for p in (ROOT / "papers").glob("*/README.md"))
PAGES += ["benchmarks/README.md"]  # each measurement's command

# How a command starts: environment settings, then the program. Inline `code` is a command only
# when it starts so (and has something after an environment setting).
PROGRAMS = r"(?:\.venv/bin/)?(?:python3?|snakemake|pytest|pip|conda)|scripts/[\w-]+\.sh|nice|sbatch|git|cd|tar"
COMMAND = re.compile(rf"(?:[A-Z_]+=\S*\s+)*(?:{PROGRAMS})(?=\s|$)")
INLINE = re.compile(rf"(?:[A-Z_]+=\S*\s+)*(?:{PROGRAMS.replace('|git|cd', '')})(?=\s|$)")

# The shell's substitutions, as a machine with one GPU and two cores answers them.
SHELL = {"$(nproc)": "2", "$(nvidia-smi -L | wc -l)": "1", "$PWD": str(ROOT)}

# What the pages leave to the reader, and what the test puts there. Whole words: A, B, M, N, ...
# (`--minutes M`); within words: <...> and the upper-case names (`OUT/state.tar.gz`).
PLACEHOLDERS = {
    "<paper>": "fedssd",
    "<name>": "fedssd",  # a paper's name (docs/extending.md: a new paper's)
    "<targets>": "papers/fedssd/table2",
    "<package>": "training",  # pytest tests/<package>
    "<sha256>": "0" * 64,
    "<id>": "0" * 12,
}
WORD_PLACEHOLDERS = {
    "M": "5",
    "N": "9",
    "X": "16",
    "T": "64",
    "S": "smoke",
    "D": "cpu",
    "A": "{}",  # --json A
    "B": "{}",
    "KEY=VALUE": "trainer.progress=false",
    "key=value": "federation.rounds=3",
    "NAME": "cifar10",
    "COMMIT": "HEAD",
}
IN_WORD_PLACEHOLDERS = ("OUTDIR", "OUT", "FILE", "DIR_A", "DIR_B", "DIR", "config.yaml")  # -> paths under tmp_path

# Paths a page's commands name that another page, or a download, makes.
PRODUCED_ELSEWHERE = {
    "cifar10-folder": "docs/data.md's python program makes it from the official archive",
    "cifar-10-batches-py": "`tar xzf cifar-10-python.tar.gz` of the official archive (docs/data.md)",
}

# Commands not checked here, each with why (page, the start of the command as written).
UNCHECKED = {
    ("docs/install.md", "cd fedrepro"): "the folder a clone was made into; the shell's own",
    ("docs/install.md", "export PYTHONPATH="): "the shell's own; the other commands run with the checkout on the path",
    ("docs/gpu-sessions.md", "git add results/shipped results/campaign"): "commits to the user's checkout",
    ("docs/gpu-sessions.md", "git commit"): "commits to the user's checkout",
    ("docs/data.md", "tar xzf cifar-10-python.tar.gz"): "unpacks the official 163 MB archive, a download",
    ("docs/gpu-sessions.md", "python -m shared.campaign bundle|train|import|status"): "names the four "
    "subcommands at once; each is checked with its arguments in the page's code blocks",
}
# Snakemake commands parsed and checked against the schema, but not dry-run here, each with why.
NOT_PLANNED = {
    ("docs/workflow.md", "snakemake --lint"): "a lint, not a plan: tests/workflow/test_workflow.py::test_lint_is_clean",
    ("docs/gpu-sessions.md", "snakemake --config copy=cifar10="): "plans only with a copy of CIFAR-10 under the "
    "data root: tests/workflow/test_workflow.py::test_a_copy_of_the_data_gets_its_own_runs_folder_and_labels "
    "builds that table from one",
}
# The README's reviewer path runs for real in tests/workflow/test_readme_commands.py.

# Where a package's command line is parsed (python -m shared.campaign runs shared/campaign/__main__.py).
PARSER_MODULES = {"shared.campaign": "shared.campaign.cli"}
OUTPUT_OPTIONS = {"-o", "--out", "--output", "--report", "--timing", "-d", "--state"}
FILE_SUFFIXES = (".yml", ".yaml", ".txt", ".lock", ".gz", ".html", ".png", ".sh", ".csv", ".zip", ".toml", ".json")


@dataclass
class Command:
    page: str
    line: int
    text: str  # continuation lines joined, the comment left out
    heredoc: str = ""  # the program of `python - <<'EOF'`
    inline: bool = False  # in the page's text, not a code block: may name a command without its arguments

    def __str__(self):
        return f"{self.page}:{self.line}: {self.text}"


@dataclass
class Page:
    """What the page's commands made so far, for the commands after them."""

    name: str
    tmp: Path
    produced: set[str] = field(default_factory=set)
    used_unchecked: set[tuple[str, str]] = field(default_factory=set)


def strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def page_commands(page: str) -> tuple[list[Command], list[str]]:
    """The page's commands in its order, and the lines of its code blocks that are neither
    commands nor comments in blocks that hold commands (a block of anything else, a file tree,
    is no shell)."""
    lines = (ROOT / page).read_text().splitlines()
    commands, stray, prose = [], [], []
    block: list[tuple[int, str]] = []
    fenced = False

    def close_block():
        found, others, i = [], [], 0
        while i < len(block):
            number, line = block[i]
            while line.endswith("\\") and i + 1 < len(block):
                i += 1
                line = line[:-1].rstrip() + " " + block[i][1].strip()
            if COMMAND.match(line.strip()):
                heredoc = ""
                if "<<'EOF'" in line:
                    body = []
                    while block[i + 1][1].strip() != "EOF":
                        i += 1
                        body.append(block[i][1])
                    i += 1
                    heredoc = "\n".join(body) + "\n"
                found.append(Command(page, number, strip_comment(line.strip()), heredoc))
            elif line.strip() and not line.strip().startswith("#"):
                others.append(f"{page}:{number}: {line.strip()}")
            i += 1
        commands.extend(found)
        if found:
            stray.extend(others)
        block.clear()

    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if fenced:
                close_block()
            fenced = not fenced
        elif fenced:
            block.append((number, line))
        elif line.startswith("    ") and (block or not lines[number - 2].strip()):
            block.append((number, line[4:]))
        elif block and not line.strip():
            block.append((number, line))
        else:
            if block:
                close_block()
            prose.append((number, line))
    close_block()
    text = "\n".join(line for _, line in prose)
    starts = np.cumsum([0] + [len(line) + 1 for _, line in prose])
    for match in re.finditer(r"`([^`]+)`", text):
        span = " ".join(match.group(1).split())
        if INLINE.match(span) and not re.fullmatch(PROGRAMS, span):  # a program's name alone is no command
            number = prose[int(np.searchsorted(starts, match.start(), side="right")) - 1][0]
            commands.append(Command(page, number, span, inline=True))
    commands.sort(key=lambda c: c.line)
    return commands, stray


def fill(word: str, tmp: Path) -> str | None:
    """A word with the reader's values put in (None: a word that stands for more of the same)."""
    if not re.fullmatch(r"\.\[[\w,]+\]", word):  # `[--option]` is optional; `.[extra]` is pip's
        word = word.strip("[]")
    if word in ("...", ""):
        return None
    if word in WORD_PLACEHOLDERS:
        return WORD_PLACEHOLDERS[word]
    for placeholder, value in PLACEHOLDERS.items():
        word = word.replace(placeholder, value)
    for paper in paper_names():  # a table of the paper named (FedGKD has no Table 2)
        word = re.sub(rf"papers/{paper}/<(table|target)>", f"papers/{paper}/{paper_target_names(paper)[0]}", word)
    for name in IN_WORD_PLACEHOLDERS:
        word = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", str(tmp / name.lower()), word)
    assert "<" not in word, f"a placeholder the test does not know: {word}"
    return word


def steps(command: Command) -> list[list[str]]:
    """The command's steps (`a && b`), each as its words as written."""
    text = command.text
    for old, new in SHELL.items():
        text = text.replace(old, new)
    text = text.replace("<<'EOF'", "")
    words = shlex.split(text, comments=True)
    found, step = [], []
    for word in [*words, "&&"]:
        if word == "&&":
            found.append(step)
            step = []
        else:
            step.append(word)
    return found


def unchecked(page: Page, written: str) -> bool:
    for key in UNCHECKED:
        if key[0] == page.name and written.startswith(key[1]):
            page.used_unchecked.add(key)
            return True
    return False


def looks_like_a_path(word: str) -> bool:
    if word.startswith(("-", "/", "http", "$")) or "=" in word or "<" in word or word.endswith("..."):
        return False
    if any(re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", word) for n in IN_WORD_PLACEHOLDERS):
        return False
    if word.startswith("papers/") and not word.endswith(FILE_SUFFIXES):
        return False  # a target
    return "/" in word or word.endswith(FILE_SUFFIXES)


def check_paths(page: Page, words: list[str]) -> list[str]:
    """The files and folders the words name: in the checkout, or made by a command before."""
    words = [w.strip("[]") for w in words]
    outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in OUTPUT_OPTIONS}
    wrong = []
    for word in words:
        if not looks_like_a_path(word) or word in outputs:
            continue
        made = [p for p in (*page.produced, *PRODUCED_ELSEWHERE) if word == p or word.startswith(p.rstrip("/") + "/")]
        if not (ROOT / word).exists() and not made:
            wrong.append(f"{word}: not in the checkout, and no command before it on the page makes it")
    page.produced |= outputs
    return wrong


def parse(module: str, argv: list[str]):
    """The module's own parser on the documented arguments (None: --help, which exits 0)."""
    mod = importlib.import_module(PARSER_MODULES.get(module, module))
    make = getattr(mod, "parser", None) or getattr(mod, "argument_parser", None)
    assert make or hasattr(mod, "parse_args"), f"{module} has no parser() to check its arguments with"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return make().parse_args(argv) if make else mod.parse_args(argv)
        except SystemExit as exc:
            assert not exc.code, f"{module} refuses {shlex.join(argv)}: {err.getvalue().strip()}"
            return None


def check_targets(targets: list[str]) -> None:
    for target in targets:
        command_targets([target])


def check_module(page: Page, module: str, args: list[str], inline: bool = False) -> None:
    if module == "pytest":
        return check_pytest(args)
    if inline and not any(a.startswith("-") or "/" in a or "=" in a for a in args[1:]) and len(args) <= 1:
        # the text names a command (`python -m shared.campaign import`): its parser knows it
        return parse(module, [*args, "--help"])
    ns = parse(module, args)
    if ns is None:
        return
    if module == "shared.run":
        from shared.run import resolve_configs

        resolve_configs(ns)  # the overrides make a config (a ConfigError otherwise)
    elif module == "shared.plan" and ns.targets:
        from shared.plan import planned_targets

        planned_targets(ns.targets)
    elif module == "shared.campaign.session":
        from shared.campaign.session import check

        check(ns)  # what a session refuses before anything is written: limits, --set, targets
    elif hasattr(ns, "targets"):
        check_targets(ns.targets)
    if getattr(ns, "set", None):
        from shared.targets.runtime_settings import parse_settings

        parse_settings(ns.set)


def check_pytest(args: list[str]) -> None:
    """Options CI's runs use, a registered marker, test folders that exist (the suite itself is CI's)."""
    declared = set(re.findall(r'^\s+"(\w+):', (ROOT / "pyproject.toml").read_text(), re.M))
    i = 0
    while i < len(args):
        if args[i] == "-m":
            names = set(re.findall(r"\w+", args[i + 1])) - {"and", "or", "not"}
            assert names <= declared, f"markers not declared in pyproject.toml: {names - declared}"
            i += 2
            continue
        if args[i] == "-k":  # an expression of test names: what it selects is the reader's
            assert i + 1 < len(args), "-k without its expression"
            i += 2
            continue
        if args[i].startswith("-"):
            assert args[i] in ("-q", "-x", "-v"), f"pytest option not checked here: {args[i]}"
        else:
            assert (ROOT / args[i].split("::")[0]).exists(), f"no {args[i]}"
        i += 1


def check_snakemake(page: Page, command: Command, args: list[str], snakemake_runs: dict | None) -> None:
    require_snakemake()
    from snakemake.cli import get_argument_parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            ns = get_argument_parser().parse_args(args)
        except SystemExit as exc:
            raise AssertionError(f"snakemake refuses {shlex.join(args)}: {err.getvalue().strip()}") from exc
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())["properties"]
    for item in ns.config or []:
        key, _, value = item.partition("=")
        assert key in schema, f"--config {key}: not a key of workflow/schemas/config.schema.yaml"
        if "enum" in schema[key]:
            assert value in schema[key]["enum"], f"--config {item}: {key} is one of {schema[key]['enum']}"
        if "pattern" in schema[key]:
            assert re.search(schema[key]["pattern"], value), f"--config {item}: not {schema[key]['pattern']}"
    for profile in ns.profile or []:
        assert (ROOT / profile / "config.yaml").exists(), f"--profile {profile}: no {profile}/config.yaml"
    not_planned = [key for key in NOT_PLANNED if key[0] == page.name and command.text.startswith(key[1])]
    page.used_unchecked |= set(not_planned)
    if snakemake_runs is not None and not not_planned:
        group = (tuple(ns.profile or ()), tuple(ns.config or ()))
        snakemake_runs.setdefault(group, set()).update(ns.targets or ["all"])


def check_pip(page: Page, args: list[str]) -> None:
    from pip._internal.commands import create_command

    command = create_command(args[0])
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            options, rest = command.parse_args(args[1:])
        except SystemExit as exc:
            raise AssertionError(f"pip refuses {shlex.join(args)}") from exc
    extras = set(
        re.findall(r"^(\w+) = \[", (ROOT / "pyproject.toml").read_text().split("optional-dependencies]")[1], re.M)
    )
    for name in [*getattr(options, "requirements", []), *getattr(options, "constraints", [])]:
        assert (ROOT / name).exists(), f"pip -r {name}: no such file"
    for requirement in [*rest, *getattr(options, "editables", [])]:
        match = re.fullmatch(r"\.(?:\[([\w,]+)\])?", requirement)
        if match:
            assert (ROOT / "pyproject.toml").exists()
            missing = set((match.group(1) or "").split(",")) - extras - {""}
            assert not missing, f"pip install {requirement}: pyproject.toml declares no extra {missing}"


def check_script(page: Page, script: str, args: list[str], env: dict, inline: bool = False) -> None:
    path = ROOT / script
    assert path.exists() and os.access(path, os.X_OK), f"{script}: missing or not executable"
    if not args and inline:  # the text names the script
        return
    if script == "scripts/setup.sh":  # --dry-run parses every option, says which torch, and stops
        proc = subprocess.run(
            ["bash", str(path), *args, "--dry-run"], capture_output=True, text=True, env={**os.environ, **env}
        )
        assert proc.returncode == 0, f"{script} {shlex.join(args)}: {proc.stderr.strip()}"
    elif script == "scripts/gpu-session.sh":  # exec python -m shared.campaign.session "$@" --carry ...
        check_module(page, "shared.campaign.session", [*args, "--carry", ".carry"])
    else:
        raise AssertionError(f"{script}: no check of its arguments here; add one, or list it in UNCHECKED")


def check_heredoc(page: Page, program: str) -> None:
    """docs/data.md's program, on an archive of two images a batch: the folder, as PNG and as JPEG."""
    src = page.tmp / "cifar-10-batches-py"
    src.mkdir()
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        data = np.random.default_rng(0).integers(0, 256, (2, 3072), dtype=np.uint8)
        (src / name).write_bytes(pickle.dumps({b"data": data, b"labels": [0, 1]}))
    for suffix in (".png", ".jpg"):  # the page: `.jpg` makes a JPEG re-encoding
        proc = subprocess.run(
            [sys.executable, "-"], input=program.replace(".png", suffix), cwd=page.tmp, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert len(list((page.tmp / "cifar10-folder" / "train").glob(f"*/*{suffix}"))) == 10
        assert len(list((page.tmp / "cifar10-folder" / "test").glob(f"*/*{suffix}"))) == 2
        # the official class names (a copy must hold them), each class's files in the official order
        airplanes = sorted(p.stem for p in (page.tmp / "cifar10-folder" / "train" / "airplane").glob(f"*{suffix}"))
        assert airplanes == ["00000", "00002", "00004", "00006", "00008"]
        assert {p.name for p in (page.tmp / "cifar10-folder" / "test").iterdir()} == {"airplane", "automobile"}
    page.produced.add("cifar10-folder")


def check(page: Page, command: Command, snakemake_runs: dict | None = None) -> list[str]:
    """What is wrong with the command, as one line each (none: it works as written)."""
    wrong = []
    for written in steps(command):
        if unchecked(page, shlex.join(written)) or unchecked(page, command.text):
            continue
        try:
            words = [w for w in (fill(w, page.tmp) for w in written) if w is not None]
            env = {}
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                key, _, value = words.pop(0).partition("=")
                env[key] = value
            if words[:2] == ["nice", "-n"]:
                words = words[3:]
            wrong += check_paths(page, written[1:])
            program, args = words[0], words[1:]
            if program == "sbatch":  # sbatch's own options are SLURM's; the job's command is ours
                inner = args[args.index("--wrap") + 1]
                wrong += check(page, Command(command.page, command.line, inner), snakemake_runs)
            elif re.fullmatch(r"(\.venv/bin/)?python3?", program) and args[:1] == ["-m"]:
                check_module(page, args[1], args[2:], command.inline)
            elif re.fullmatch(r"(\.venv/bin/)?python3?", program) and args[:1] == ["scripts/requirements.py"]:
                # writes requirements*.txt; --check (the same arguments otherwise) writes nothing
                proc = subprocess.run([sys.executable, str(ROOT / args[0]), *(args[1:] or ["--check"])])
                assert proc.returncode == 0, f"{shlex.join(args)}: exit status {proc.returncode}"
            elif re.fullmatch(r"(\.venv/bin/)?python3?", program) and args == ["-"]:
                check_heredoc(page, command.heredoc)
            elif re.fullmatch(r"(\.venv/bin/)?pytest", program):
                check_pytest(args)
            elif re.fullmatch(r"(\.venv/bin/)?snakemake", program):
                check_snakemake(page, command, args, snakemake_runs)
            elif program == "pip":
                check_pip(page, args)
            elif program == "conda" and args[:2] == ["env", "create"]:
                env_file = args[args.index("-f") + 1]
                assert yaml.safe_load((ROOT / env_file).read_text())["name"], f"{env_file}: no environment name"
            elif program.startswith("scripts/"):
                check_script(page, program, args, env, command.inline)
            else:
                raise AssertionError("no check for this command: add one, or list it in UNCHECKED with why")
        except Exception as exc:  # any refusal is the command's failure, said in one line
            wrong.append(f"{type(exc).__name__}: {exc}".splitlines()[0])
    return [f"{command}\n    {line}" for line in wrong]


@pytest.mark.parametrize("name", PAGES)
def test_page_commands_work_as_written(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing a command writes lands in the checkout
    commands, stray = page_commands(name)
    assert not stray, "lines of a code block with commands that are neither commands nor comments:\n" + "\n".join(stray)
    page = Page(name, tmp_path)
    (tmp_path / "config.yaml").write_text("federation:\n  rounds: 3\n")  # a run config of the reader's
    wrong = [line for command in commands for line in check(page, command)]
    assert not wrong, "\n".join(wrong)
    stale = {key for key in [*UNCHECKED, *NOT_PLANNED] if key[0] == name} - page.used_unchecked
    assert not stale, f"UNCHECKED or NOT_PLANNED names commands the page no longer has: {stale}"


def test_pages_have_commands():
    """The extraction finds what the pages show (a change of their layout would otherwise pass)."""
    found = {name: page_commands(name)[0] for name in PAGES}
    assert len(found["README.md"]) >= 8
    assert all(found[f"papers/{paper}/README.md"] for paper in paper_names())
    texts = [c.text for c in found["docs/install.md"]]
    assert "scripts/setup.sh --text --tensorboard && .venv/bin/python -m pytest -q" in texts
    assert any(c.heredoc for c in found["docs/data.md"])


def test_snakemake_targets_plan_as_documented(tmp_path):
    """Every documented Snakemake target, planned by `snakemake -n` in a fresh copy of the
    project: one dry run for each profile and --config the pages use together."""
    groups: dict = {}
    for name in PAGES:
        page = Page(name, tmp_path / name.replace("/", "_"))
        for command in page_commands(name)[0]:
            check(page, command, groups)
    assert groups
    project = make_project(tmp_path / "project")
    runs = {}
    for (profiles, config), targets in sorted(groups.items()):  # at once: each waits on its start-up
        args = [a for p in profiles for a in ("--profile", p)] + (["--config", *config] if config else [])
        shown = f"snakemake -n {shlex.join(args)} -- {' '.join(sorted(targets))}"
        command = [sys.executable, "-m", "snakemake", "-n", "--cores", "2", *args, "--", *sorted(targets)]
        runs[shown] = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    failures = []
    for shown, proc in runs.items():
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"{shown}\n{stderr[-2000:]}")
    assert not failures, "\n".join(failures)


def test_what_the_workflow_writes_leaves_git_status_clean():
    """Every output of the documented commands at paper scale (a paper's tables, figures,
    searches and claims land in papers/, the runs shared by papers beside them) is ignored by
    git, as are the runs, logs, data, Snakemake's state and the report."""
    written = [f"papers/{paper}/{name}/table.csv" for paper in paper_names() for name in paper_target_names(paper)]
    written += [f"papers/{paper}/claims/claims.csv" for paper in paper_names()]
    written += ["papers/shared_runs/shared.csv", "results/runs/x/metrics.json", "results/logs/x.log"]
    written += ["results/smoke/fedssd/table2/table.csv", "data/cifar-10-python.tar.gz", ".snakemake/x", "report.html"]
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", "--stdin"],
        cwd=ROOT,
        input="\n".join(written) + "\n",
        capture_output=True,
        text=True,
    )
    tracked = [line.split("\t")[1] for line in proc.stdout.splitlines() if line.startswith("::")]
    assert not tracked, f"git would show these outputs as untracked: {tracked}"


def test_every_measurement_says_how_to_reproduce_it():
    """benchmarks/README.md holds the current measurements (at most 200 lines; their history is
    CHANGELOG.md's), each section with the command that measures it, checked above."""
    text = (ROOT / "benchmarks" / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    commands = page_commands("benchmarks/README.md")[0]
    starts = [i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("## ")]
    for start, end in zip(starts, [*starts[1:], len(text.splitlines()) + 1]):
        title = text.splitlines()[start - 1]
        if title != "## The data these benchmarks read":  # how the data is made: docs/data.md's program
            assert any(start < c.line < end for c in commands), f"benchmarks/README.md {title}: no command"

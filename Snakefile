# Regenerate a paper's table:   snakemake --cores 8 papers/fedssd/table2
# At a small scale on a CPU:    snakemake --cores 2 --config scale=smoke device=cpu -- papers/fedssd/table2
#                               (lands in results/smoke/fedssd/table2/: papers/ holds paper scale only)
# On SLURM:                     snakemake --profile profiles/slurm papers/fedssd/table2
# With no target (`snakemake`): the rule `all` lists the targets and builds nothing.
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

sys.dont_write_bytecode = True  # reading the workflow writes nothing, not even shared/'s __pycache__

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


try:
    validate(config, "workflow/schemas/config.schema.yaml")
except WorkflowError as exc:  # the key and what is wrong with it, not the schema's text
    cause = exc.__context__
    key = ".".join(map(str, getattr(cause, "path", [])))
    where = f"--config {key}" if key else "--config"
    raise WorkflowError(f"{where}: {getattr(cause, 'message', exc)}") from None


include: "workflow/rules/common.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/run_states.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/papers.smk"

rule all:
    """The default target. A paper's targets cost up to thousands of GPU-hours at paper scale,
    so nothing is built without naming what: this lists every target, where it lands at this
    scale and how many runs it needs (`python -m shared.plan PAPER` estimates GPU-hours)."""
    default_target: True
    localrule: True
    log:
        f"{LOGS}/targets.txt",
    run:
        list_targets(log[0])


# A target's name: papers/<paper>/<name> at every scale. Its inputs are the target's output (under
# a reduced scale or on a copy of the data, that name is an alias of it, so the commands of the
# README keep working: `--config scale=smoke -- papers/fedssd/table2`) and its runs (common.smk
# `runs_to_finish`: a run gone, failed or unreadable builds the target again).
for _paper in EXPANSION.papers():
    for _name in [*EXPANSION.names(_paper), *PAPER_SUMMARIES]:

        rule:
            name:
                f"papers/{_paper}/{_name}"
            input:
                target_path(_paper, _name),
                lambda wildcards, paper=_paper, name=_name: runs_to_finish(paper, [name]),
            localrule: True

# Regenerate a paper's table:   snakemake --cores 8 papers/fedssd/table2
# At a small scale on a CPU:    snakemake --cores 2 --config scale=smoke device=cpu -- papers/fedssd/table2
#                               (lands in results/smoke/fedssd/table2/: papers/ holds paper scale only)
# On SLURM:                     snakemake --profile profiles/slurm papers/fedssd/table2
# With no target (`snakemake`): the rule `all` lists the targets and builds nothing.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/papers.smk"

# Table, figure and search jobs log what they did and rebuild the run index results/index.csv
# (`logged` in workflow/rules/common.smk wraps the builders the rules in tables.smk call).
build_table, build_figure, build_search = logged(build_table), logged(build_figure), logged(build_search)


rule all:
    """The default target. A paper's targets cost up to thousands of GPU-hours at paper scale,
    so nothing is built without naming what: this lists every target, where it lands at this
    scale and how many runs it needs (`python -m shared.plan PAPER` estimates GPU-hours)."""
    default_target: True
    localrule: True
    run:
        lines = [f"Nothing is built without a target. Targets at scale={SCALE} (runs), landing in {OUT}/<paper>/<target>/:"]
        for _p in paper_names():
            names = [*paper_tables(_p), *paper_figures(_p), *paper_searches(_p)]
            lines.append(f"  {_p} (every table and figure), {_p}_searches, or one of:")
            for _n in names:
                count = len({c.run_id for paper, name, c in CELLS if paper == _p and name == _n})
                lines.append(f"    papers/{_p}/{_n}" + (f" ({count})" if count else ""))
        lines.append("e.g. snakemake --cores 2 --config scale=smoke device=cpu -- papers/fedssd/table2")
        print("\n".join(lines))


if SCALE != "paper":
    # Under a reduced scale a paper-scale name is an alias of that scale's output, so the
    # commands of the README keep working: `--config scale=smoke -- papers/fedssd/table2`.
    for _paper in paper_names():
        for _name in [*paper_tables(_paper), *paper_figures(_paper), *paper_searches(_paper), "claims"]:

            rule:
                name:
                    f"papers/{_paper}/{_name}"
                input:
                    target_path(_paper, _name),
                localrule: True

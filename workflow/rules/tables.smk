from shared.figures import build_figure, get_figure
from shared.plan import write_shared_runs
from shared.tables import build_paper_claims, build_search, build_table


rule table:
    """A paper's table: table.csv, table.tex, comparison.csv/.md, claims.csv/.md, provenance.yaml (+ curves)."""
    input:
        table_inputs,
    output:
        report(
            directory(OUT + "/{paper}/{table}"),
            # the comparison opens in the report (HTML), the rest is labelled for download
            patterns=[r"{file,claims\.html|comparison\.html|comparison\.png|curves\.png|table\.csv|table\.tex|provenance\.yaml}"],
            caption="../report/table.rst",
            category="{paper}",
            subcategory="{table}",
            labels=lambda w: {"table": w.table, "shows": {
                "claims.html": "claims: the paper's claims on our runs (claims.html)",
                "comparison.html": "comparison with the paper (comparison.html)",
                "comparison.png": "ours vs the paper, plotted (comparison.png)",
                "curves.png": "learning curves (curves.png)",
                "table.csv": "table as CSV (table.csv)",
                "table.tex": "table as LaTeX (table.tex)",
                "provenance.yaml": "provenance (provenance.yaml)"}.get(w.file, w.file)},
        ),
    wildcard_constraints:
        paper="[^/]+",
        table="table[0-9A-Za-z]+",
    log:
        LOGS + "/tables/{paper}-{table}.log",
    localrule: True
    run:
        build_table(get_table(wildcards.paper, wildcards.table), SCALE, "results/runs", output[0], RUNTIME)


def figure_inputs(wildcards):
    try:
        figure = get_figure(wildcards.paper, wildcards.figure)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return [f"results/runs/{c.run_id}/metrics.json" for c in figure.cells(SCALE, RUNTIME)]


rule figure:
    """A paper's figure drawn from one of its tables' runs: figure.pdf, figure.png, provenance.yaml."""
    input:
        figure_inputs,
    output:
        report(
            directory(OUT + "/{paper}/{figure}"),
            patterns=[r"{file,figure\.png|figure\.pdf|figure\.csv|provenance\.yaml}"],
            caption="../report/figure.rst",
            category="{paper}",
            subcategory="{figure}",
            labels=lambda w: {"figure": w.figure, "shows": {
                "figure.png": "figure (figure.png)",
                "figure.pdf": "figure as PDF (figure.pdf)",
                "figure.csv": "numbers drawn (figure.csv)",
                "provenance.yaml": "provenance (provenance.yaml)"}.get(w.file, w.file)},
        ),
    wildcard_constraints:
        paper="[^/]+",
        figure="fig[0-9A-Za-z]+",
    log:
        LOGS + "/figures/{paper}-{figure}.log",
    localrule: True
    run:
        build_figure(get_figure(wildcards.paper, wildcards.figure), SCALE, "results/runs", output[0], RUNTIME)


rule search:
    """A hyperparameter search: search.csv, best.yaml (the best point per setting), provenance.yaml."""
    input:
        search_inputs,
    output:
        directory(OUT + "/{paper}/{search}"),
    wildcard_constraints:
        paper="[^/]+",
        search="search_[0-9A-Za-z_]+",
    log:
        LOGS + "/searches/{paper}-{search}.log",
    localrule: True
    run:
        build_search(get_search(wildcards.paper, wildcards.search), SCALE, "results/runs", output[0], RUNTIME)


def build_and_log(log, build, *args, out_dir, **kwargs):
    """`build` (the claims summary, the shared-runs page), then what it wrote into the job's log."""
    build(*args, out_dir=out_dir, **kwargs)
    written = ", ".join(sorted(p.name for p in Path(out_dir).iterdir()))
    Path(log).write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {build.__name__} at scale={SCALE} -> {out_dir}: {written}\n")


rule claims:
    """Every claim of a paper on its built tables' runs: claims.md, claims.csv, claims.html."""
    input:
        lambda w: [target_path(w.paper, name) for name in paper_tables(w.paper)],
    output:
        report(
            directory(OUT + "/{paper}/claims"),
            patterns=[r"{file,claims\.html|claims\.csv}"],
            caption="../report/claims.rst",
            category="{paper}",
            subcategory="claims",  # sorts before the figures and tables
            labels=lambda w: {"table": "all", "shows": {"claims.html": "claims: every claim of the paper (claims.html)",
                                                        "claims.csv": "claims as CSV (claims.csv)"}.get(w.file, w.file)},
        ),
    wildcard_constraints:
        paper="[^/]+",
    log:
        LOGS + "/claims/{paper}.log",
    localrule: True
    run:
        build_and_log(log[0], build_paper_claims, wildcards.paper, SCALE, RUNS_DIR, out_dir=output[0], runtime=RUNTIME)


def finished_runs(tables):
    """The metrics.json of the tables' runs that have finished: a listing of what is measured so
    far, which never asks for a run to be trained."""
    paths = {f"{RUNS_DIR}/{c.run_id}/metrics.json" for t in tables for c in expand(t, SCALE, RUNTIME)}
    return sorted(p for p in paths if Path(p).exists())


rule shared_runs:
    """Runs that tables of several papers need, each paper's number beside ours (shared.md/.csv/.html),
    from the runs finished so far (build it after the tables it should show)."""
    input:
        lambda w: finished_runs(all_tables()),
    output:
        report(
            directory(OUT + "/shared_runs"),
            patterns=[r"{file,shared\.html|shared\.csv}"],
            caption="../report/shared.rst",
            category="across papers",
            labels=lambda w: {"shows": {"shared.html": "one experiment, several papers (shared.html)",
                                        "shared.csv": "as CSV (shared.csv)"}.get(w.file, w.file)},
        ),
    log:
        LOGS + "/shared_runs.log",
    localrule: True
    run:
        build_and_log(log[0], write_shared_runs, SCALE, RUNS_DIR, out_dir=output[0], runtime=RUNTIME)

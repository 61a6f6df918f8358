# The builders (`build` in common.smk) log what they did and rebuild the run index results/index.csv.


rule table:
    """A paper's table: table.csv, table.tex, comparison.csv/.md, claims.csv/.md, provenance.yaml (+ curves)."""
    input:
        target_inputs("table"),
    output:
        report(
            directory(f"{OUT}/{{paper}}/{{table}}"),
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
    params:
        code=drawing_params,  # its declaration and the code that draws it: changed, it is drawn again
    log:
        f"{LOGS}/tables/{{paper}}-{{table}}.log",
    localrule: True
    run:
        build("table", wildcards.paper, wildcards.table, output[0], log[0])


rule figure:
    """A paper's figure drawn from one of its tables' runs: figure.pdf, figure.png, provenance.yaml."""
    input:
        target_inputs("figure"),
    output:
        report(
            directory(f"{OUT}/{{paper}}/{{figure}}"),
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
        figure="fig[0-9A-Za-z_]+",
    params:
        code=drawing_params,  # its declaration and the code that draws it: changed, it is drawn again
    log:
        f"{LOGS}/figures/{{paper}}-{{figure}}.log",
    localrule: True
    run:
        build("figure", wildcards.paper, wildcards.figure, output[0], log[0])


rule partition:
    """A run's partition (its clients' training samples per class) computed without training it:
    what a figure of partitions draws (shared/partition_job.py); a CPU job of seconds."""
    input:
        partition_input,
    output:
        f"{PARTITIONS}/{{run_id}}.csv",
    wildcard_constraints:
        run_id="[0-9a-f]{16}",
    log:
        f"{LOGS}/partitions/{{run_id}}.log",
    retries: RETRIES
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=8000,  # the dataset, loaded as a run loads it; no model
        runtime=30,
    shell:
        PARTITION_COMMAND


rule probe:
    """A figure's probe (Figure.probe) on one of its finished runs: a GPU job of its own, whose
    frame the figure's drawing reads."""
    input:
        probe_input,
    output:  # named by its code too: a change to the probe's module or arguments computes it again
        f"{PROBES}/{{paper}}-{{figure}}-{{run_id}}-{{code}}.csv",
    wildcard_constraints:
        paper="[^/-]+",
        figure="fig[0-9A-Za-z_]+",
        run_id="[0-9a-f]{16}",
        code="[0-9a-f]{16}",
    log:
        f"{LOGS}/probes/{{paper}}-{{figure}}-{{run_id}}-{{code}}.log",
    benchmark:  # a GPU job of hours, timed as a run job is
        "results/benchmarks/probes/{paper}-{figure}-{run_id}-{code}.tsv"
    retries: RETRIES
    conda:
        ENVIRONMENT
    threads: run_threads()
    resources:
        gpu=0 if config["device"] == "cpu" else 1,  # as a run job
        mem_mb=lambda wildcards: run_memory(RUNS[wildcards.run_id]),
        runtime=lambda wildcards, attempt: probe_minutes(wildcards, attempt),
    shell:
        PROBE_COMMAND


rule search:
    """A hyperparameter search: search.csv, best.yaml (the best point per setting), provenance.yaml."""
    input:
        target_inputs("search"),
    output:
        directory(f"{OUT}/{{paper}}/{{search}}"),
    wildcard_constraints:
        paper="[^/]+",
        search="search_[0-9A-Za-z_]+",
    params:
        code=drawing_params,  # its declaration and the code that draws it: changed, it is drawn again
    log:
        f"{LOGS}/searches/{{paper}}-{{search}}.log",
    localrule: True
    run:
        build("search", wildcards.paper, wildcards.search, output[0], log[0])


# A paper's claims and the runs several papers share span the official datasets: on a copy of one
# (--config copy=...) neither is defined, so that none is built from the official runs into the
# copy's folder nor labelled as the copy's (docs/gpu-sessions.md).
if COPY is None:

    rule claims:
        """Every claim of a paper on its built tables' runs: claims.md, claims.csv, claims.html."""
        input:
            lambda w: [target_path(w.paper, name) for name in EXPANSION.names(w.paper, "table")],
        output:
            report(
                directory(f"{OUT}/{{paper}}/claims"),
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
            f"{LOGS}/claims/{{paper}}.log",
        localrule: True
        run:
            build_summary("claims", output[0], log[0], wildcards.paper)


    rule shared_runs:
        """Runs that tables of several papers need, each paper's number beside ours (shared.md/.csv/.html),
        from the runs finished so far (build it after the tables it should show)."""
        input:
            finished_table_runs,
        output:
            report(
                directory(f"{OUT}/shared_runs"),
                patterns=[r"{file,shared\.html|shared\.csv}"],
                caption="../report/shared.rst",
                category="across papers",
                labels=lambda w: {"shows": {"shared.html": "one experiment, several papers (shared.html)",
                                            "shared.csv": "as CSV (shared.csv)"}.get(w.file, w.file)},
            ),
        log:
            f"{LOGS}/shared_runs.log",
        localrule: True
        run:
            build_summary("shared_runs", output[0], log[0])

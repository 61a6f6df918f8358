from shared.figures import build_figure, get_figure
from shared.tables import build_search, build_table


rule table:
    """A paper's table: table.csv, table.tex, comparison.csv/.md, provenance.yaml (+ curves)."""
    input:
        table_inputs,
    output:
        report(
            directory("papers/{paper}/{table}"),
            patterns=["{name}.md", "{name}.png", "{name}.csv"],
            category="{paper}",
            subcategory="{table}",
            labels={"paper": "{paper}", "table": "{table}"},
        ),
    wildcard_constraints:
        paper="[^/]+",
        table="table[0-9A-Za-z]+",
    log:
        "results/logs/tables/{paper}-{table}.log",
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
            directory("papers/{paper}/{figure}"),
            patterns=["{name}.png"],
            category="{paper}",
            subcategory="{figure}",
            labels={"paper": "{paper}", "figure": "{figure}"},
        ),
    wildcard_constraints:
        paper="[^/]+",
        figure="fig[0-9A-Za-z]+",
    log:
        "results/logs/figures/{paper}-{figure}.log",
    localrule: True
    run:
        build_figure(get_figure(wildcards.paper, wildcards.figure), SCALE, "results/runs", output[0], RUNTIME)


rule search:
    """A hyperparameter search: search.csv, best.yaml (the best point per setting), provenance.yaml."""
    input:
        search_inputs,
    output:
        directory("papers/{paper}/{search}"),
    wildcard_constraints:
        paper="[^/]+",
        search="search_[0-9A-Za-z_]+",
    log:
        "results/logs/searches/{paper}-{search}.log",
    localrule: True
    run:
        build_search(get_search(wildcards.paper, wildcards.search), SCALE, "results/runs", output[0], RUNTIME)

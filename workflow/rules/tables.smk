from shared.tables import build_table


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
        paper="|".join(PAPERS),
        table="table[0-9A-Za-z]+",
    log:
        "results/logs/tables/{paper}-{table}.log",
    localrule: True
    run:
        build_table(get_table(wildcards.paper, wildcards.table), SCALE, "results/runs", output[0], RUNTIME)

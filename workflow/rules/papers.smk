# Per-paper aggregate targets, generated for every paper that registers itself (shared/targets/papers.py):
#   snakemake <paper>             every table and figure of the paper
#   snakemake <paper>_searches    every hyperparameter search it describes (best.yaml per search)


for _paper in EXPANSION.papers():

    rule:
        name:
            _paper
        input:
            paper_targets(_paper),
            lambda wildcards, paper=_paper: runs_to_finish(paper, EXPANSION.names(paper, "table", "figure")),

    rule:
        name:
            f"{_paper}_searches"
        input:
            search_targets(_paper),
            lambda wildcards, paper=_paper: runs_to_finish(paper, EXPANSION.names(paper, "search")),

rule fedcsd:
    """Every table and figure of this paper."""
    input:
        paper_targets("fedcsd"),


rule fedcsd_searches:
    """Every hyperparameter search this paper describes; best.yaml holds the chosen values."""
    input:
        search_targets("fedcsd"),

rule fedgkd:
    """Every table and figure of this paper."""
    input:
        paper_targets("fedgkd"),


rule fedgkd_searches:
    """Every hyperparameter search this paper describes; best.yaml holds the chosen values."""
    input:
        search_targets("fedgkd"),

rule fedssd:
    """Every table and figure of this paper."""
    input:
        paper_targets("fedssd"),


rule fedssd_searches:
    """Every hyperparameter search this paper describes; best.yaml holds the chosen values."""
    input:
        search_targets("fedssd"),

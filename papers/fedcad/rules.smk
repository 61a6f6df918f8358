rule fedcad:
    """Every table and figure of this paper."""
    input:
        paper_targets("fedcad"),

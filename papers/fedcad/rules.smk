rule fedcad:
    """Every table of this paper."""
    input:
        table_targets("fedcad"),

rule fedcsd:
    """Every table of this paper."""
    input:
        table_targets("fedcsd"),

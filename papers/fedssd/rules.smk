rule fedssd:
    """Every table of this paper."""
    input:
        table_targets("fedssd"),

rule fedssd:
    """Every table and figure of this paper."""
    input:
        paper_targets("fedssd"),

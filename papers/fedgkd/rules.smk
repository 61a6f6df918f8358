rule fedgkd:
    """Every table and figure of this paper."""
    input:
        paper_targets("fedgkd"),

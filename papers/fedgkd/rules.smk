rule fedgkd:
    """Every table of this paper."""
    input:
        table_targets("fedgkd"),

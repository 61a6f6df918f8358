"""What a paper asks for: configs, experiments (tables, searches, figures), the runs a target needs."""

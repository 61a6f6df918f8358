"""FedGKD: local-global knowledge distillation in heterogeneous federated learning with non-IID data."""

NAME = "FedGKD"  # how titles and captions name the paper
METHODS = {"fedgkd": ".fedgkd:FedGKD"}

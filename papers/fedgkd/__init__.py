"""FedGKD: local-global knowledge distillation in heterogeneous federated learning with non-IID data."""
METHODS = {"fedgkd": ".fedgkd:FedGKD"}

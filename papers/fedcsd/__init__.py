"""FedCSD: rethinking client drift in federated learning, a logit perspective."""
METHODS = {"fedcsd": ".fedcsd:FedCSD"}

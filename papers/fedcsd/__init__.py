"""FedCSD: rethinking client drift in federated learning, a logit perspective."""

NAME = "FedCSD"  # how titles and captions name the paper
METHODS = {"fedcsd": ".fedcsd:FedCSD"}

"""FedSSD: learning critically, selective self distillation in federated learning on non-IID data."""

NAME = "FedSSD"  # how titles and captions name the paper
METHODS = {"fedssd": ".fedssd:FedSSD"}

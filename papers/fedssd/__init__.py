"""FedSSD: learning critically, selective self distillation in federated learning on non-IID data."""
METHODS = {"fedssd": ".fedssd:FedSSD"}

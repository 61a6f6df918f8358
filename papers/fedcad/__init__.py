"""FedCAD: class-wise adaptive self distillation for heterogeneous federated learning (FL-AAAI-22)."""

NAME = "FedCAD"  # how titles and captions name the paper
METHODS = {"fedcad": ".fedcad:FedCAD"}

"""FedCAD: class-wise adaptive self distillation for heterogeneous federated learning (FL-AAAI-22)."""
METHODS = {"fedcad": ".fedcad:FedCAD"}

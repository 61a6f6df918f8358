"""FedAvg and its hooks, the method registry, and every method as a small subclass."""

"""The baselines the four papers compare against, each a small module on FedAvg's hooks."""

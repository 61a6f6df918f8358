"""FedNova (Wang et al., NeurIPS'20), in NIID-Bench's form: normalised averaging.

A client that took tau_i local steps of SGD with momentum rho has the normaliser
a_i = [tau_i - rho (1 - rho^tau_i) / (1 - rho)] / (1 - rho)  (= tau_i without momentum);
its normalised update is d_i = (w_g - w_i) / a_i, and the server steps
w <- w_g - (sum_i p_i a_i) * sum_i p_i d_i, with p_i the clients' data fractions.
Like NIID-Bench, the step applies to every floating-point entry of the state (BatchNorm's
running statistics included); integer counters are averaged. Where the clients' a_i differ, the
step on a running variance that every client moved alike goes past their weighted average by
(sum_i p_i a_i)(sum_i p_i / a_i) >= 1 (1.08 for 10 clients of CIFAR-10 under Dir(0.5), more for
sizes further apart): a round that drops the variances sharply can leave one negative, the global
model's test loss NaN, and the run diverged.
"""

from dataclasses import dataclass

from shared.methods.fedavg import FedAvg, weighted_average


def normaliser(steps: int, rho: float) -> float:
    if rho == 0:
        return float(steps)
    return (steps - rho * (1 - rho**steps) / (1 - rho)) / (1 - rho)


class FedNova(FedAvg):
    requires_local_sgd = True  # its arithmetic models plain local SGD steps

    @dataclass
    class Params:
        pass

    def aggregate(self, global_model, updates):
        weights = self.client_weights(updates)
        p = [w / sum(weights) for w in weights]
        a = [normaliser(u.num_steps, self.cfg.local.momentum) for u in updates]
        tau_eff = sum(pi * ai for pi, ai in zip(p, a))
        w_g = global_model.state_dict()
        averaged = weighted_average([u.state for u in updates], weights)  # integer counters
        new = {}
        for key, w in w_g.items():
            if not w.is_floating_point():
                new[key] = averaged[key]
                continue
            d = sum(pi * (w - u.state[key]) / ai for pi, ai, u in zip(p, a, updates))
            new[key] = w - tau_eff * d
        global_model.load_state_dict(new)

"""Which runs train together: a table row across its settings and seeds, nothing wider."""

from shared.config.schema import RunConfig
from shared.targets.run_groups import form_groups, group_key
from shared.targets.table_declarations import declared, expand


def table_runs(paper: str, name: str, scale: str) -> dict[str, RunConfig]:
    return {cell.run_id: cell.config for cell in expand(declared(paper, "TABLES")[name], scale)}


def test_a_fedssd_table2_row_is_one_group_of_its_settings_and_seeds():
    runs = table_runs("fedssd", "table2", "paper")
    groups = form_groups(runs, 15)
    assert sorted(map(len, groups)) == [15] * 8  # 8 rows (FedSSD's two readings) x (5 settings x 3 seeds)
    for group in groups:
        assert len({runs[rid].method["name"] for rid in group}) == 1
        assert [runs[rid].seed for rid in group] == sorted(runs[rid].seed for rid in group)


def test_largest_splits_a_row_and_groups_never_mix_methods_or_models():
    runs = table_runs("fedcad", "table2", "smoke")
    groups = form_groups(runs, 3)
    assert all(len(g) <= 3 for g in groups)
    assert sorted(rid for g in groups for rid in g) == sorted(runs)
    for group in groups:
        assert len({group_key(runs[rid]) for rid in group}) == 1
    keys = {group_key(cfg) for cfg in runs.values()}
    assert len(keys) == len({(cfg.method["name"], cfg.model.name) for cfg in runs.values()})


def test_runs_group_only_with_runs_of_the_same_targets():
    """A workflow job of a group trains every run of it: with each run's targets (`used_by`),
    a group holds only runs that the same targets use, so asking for FedSSD's Table II trains
    its 120 runs and none of another target's (Fig. 9's other local epochs, say)."""
    from shared.targets.expansion_cache import expand_all

    expansion = expand_all("paper", {})
    used_by = expansion.used_by()
    table2 = set(expansion.target_runs("fedssd", "table", "table2"))
    assert all("fedssd/table2" in used_by[rid] for rid in table2)
    groups = form_groups(expansion.runs, 4, used_by)
    assert sorted(rid for g in groups for rid in g) == sorted(expansion.runs)
    assert all(len({used_by[rid] for rid in g}) == 1 for g in groups)
    assert {rid for g in groups if set(g) & table2 for rid in g} == table2
    mixed = form_groups(expansion.runs, 4)  # without: other targets' runs join Table II's groups
    assert {rid for g in mixed if set(g) & table2 for rid in g} > table2


def test_the_campaign_trains_every_groups_first_seed_before_further_seeds():
    from types import SimpleNamespace

    from shared.campaign.train import training_units

    runs = table_runs("fedssd", "table2", "smoke")
    units = training_units(runs, SimpleNamespace(device="cpu", data_root=None, clients_per_step=1))
    order = [rid for unit in units for rid in unit]
    assert sorted(order) == sorted(runs)
    seeds = [runs[rid].seed for rid in order]
    assert len(set(seeds)) > 1 and seeds == sorted(seeds, key=lambda seed: seed != min(seeds))
    assert all(len(unit) == 1 for unit in units)  # on a CPU a group's runs train one after another

"""Settings the papers pin down outside their tables' captions (a sentence of the text, a number two
tables share, the released code), resolved as the tables declare them."""

from shared.targets.resolve import named_cells


def cells(paper: str, table: str, scale: str = "paper") -> dict:
    return {(c.row.label, c.column.label, c.seed): c for c in named_cells(paper, table, scale)}


def test_fedgkd_on_text_buffers_one_global_model():
    """Section 3: "for NLP fine-tuning tasks, we'd suggest set M as 1"; Table 4's FedGKD on SST-5
    (43.24 ± 1.80) is Table 9's KL row at M = 1: the same runs."""
    table4, table9 = cells("fedgkd", "table4"), cells("fedgkd", "table9")
    for seed in (0, 1, 2):
        assert table4[("FedGKD", "SST-5 α=0.1", seed)].run_id == table9[("KL", "SST-5", seed)].run_id
    for row in ("FedGKD", "FedGKD+"):
        assert {c.config.method["buffer"] for (r, _, _), c in table4.items() if r == row} == {1}
    assert {c.config.method["buffer"] for (r, _, _), c in table4.items() if r == "FedGKD-VOTE"} == {3}


def test_fedgkd_fedgen_takes_its_ports_weight_and_noise_per_dataset():
    """The weight is tuned in {0.1, 1, 10} and not printed: FedGKD's port's RUNCONFIGS and
    GENERATORCONFIGS per dataset."""
    expected = {  # dataset: (weight, noise, hidden)
        "CIFAR-10": (0.1, 64, 512),
        "CIFAR-100": (1.0, 64, 512),
        "Tiny-ImageNet": (0.1, 2048, 2048),
        "AG News": (1.0, 768, 768),
        "SST-5": (1.0, 768, 768),
    }
    seen = set()
    for table in ("table3", "table4"):
        for (row, column, _), cell in cells("fedgkd", table).items():
            if row == "FedGen":
                dataset = column.split(" α")[0]
                method = cell.config.method
                assert (method["alpha"], method["noise_dim"], method["hidden"]) == expected[dataset], column
                seen.add(dataset)
    assert seen == set(expected)


def test_fedgkd_augments_tiny_imagenet_as_its_released_code():
    """RandomCrop(64, padding=4) and a flip, as on CIFAR; text is not augmented."""
    for (row, column, _), cell in cells("fedgkd", "table3").items():
        expected = "always:feddf" if column.startswith("Tiny") else "feddf"
        assert cell.config.dataset.augmentation == expected, (row, column)


def test_fedcad_femnist_is_the_ten_digits():
    """The paper's FedAvg reaches 94.25% and a 90% target in 6 rounds on FEMNIST, out of reach on
    LEAF's 62 classes; its partitions follow NIID-Bench, whose FEMNIST is the 10 digits."""
    femnist = [c for (_, column, _), c in cells("fedcad", "table1").items() if column.startswith("FEMNIST")]
    assert len(femnist) == 24 and {c.config.dataset.name for c in femnist} == {"femnist_digits"}


def test_fedcsd_fig6_has_three_label_skew_panels_and_office():
    """ "better convergence ... in the label skew setting (Fig. 6 (a, b, c)) ... the feature skew
    setting (Fig. 6 (d))"; FedCSD's own mu and tau have no search beyond Fig. 3's grids."""
    from papers.fedcsd.tables import CONVERGENCE, SEARCHES

    assert [c.label for c in CONVERGENCE.columns] == [
        "CIFAR-100 β=0.5",
        "FEMNIST β=0.05",
        "FEMNIST β=0.01",
        "Office-Caltech-10",
    ]
    assert "FedCSD" not in {search.row for search in SEARCHES}


def test_every_resnet_of_the_papers_starts_from_their_codes_initial_weights():
    """MOON's and FedCSD's ResNets (kaiming_normal_, fan_out) and FedDF's, which FedGKD's code
    takes (N(0, 2 / (k^2 out_channels))): model.init=kaiming_fan_out; other models PyTorch's own."""
    from shared.targets.table_declarations import all_tables, expand

    inits = {}
    for table in all_tables():
        for cell in expand(table, "paper"):
            inits.setdefault(cell.config.model.name, set()).add(cell.config.model.init)
    assert {name: init for name, init in inits.items() if name.startswith("resnet")} == {
        "resnet8": {"kaiming_fan_out"},
        "resnet50": {"kaiming_fan_out"},
        "resnet50_gn": {"kaiming_fan_out"},
    }
    assert all(init == {None} for name, init in inits.items() if not name.startswith("resnet"))


def test_fedssd_figs_3_and_4_train_fedavg_with_table_2s_protocol():
    """Figs. 3-4: FedAvg, Section 5.1's CIFAR-10 protocol (10 clients, all of them each round,
    100 rounds, E = 10, B = 64, lr 0.01), Dir(0.5) as Table II's δ=0.5 and IID, each local model
    tested per class; Fig. 4 probes the Dir(0.5) run with FedAvg and FedSSD's rows of Table II."""
    from papers.fedssd.tables import FIGURES

    figures = {f.name: f for f in FIGURES}
    fig3 = {c.column.label: c.config for c in figures["fig3"].cells("paper")}
    table2 = cells("fedssd", "table2")[("FedAvg", "δ=0.5", 0)].config
    assert set(fig3) == {"δ=0.5", "IID"} and fig3["IID"].partition.kind == "iid"
    for cfg in fig3.values():
        assert (cfg.method["name"], cfg.dataset.name, cfg.model.name, cfg.seed) == (
            "fedavg",
            "cifar10",
            "fedavg_cnn",
            0,
        )
        assert (cfg.partition.clients, cfg.federation.participation, cfg.federation.rounds) == (10, 1.0, 100)
        assert (cfg.local.epochs, cfg.local.batch_size, cfg.local.lr, cfg.eval.local) == (10, 64, 0.01, "per_class")
    assert fig3["δ=0.5"].partition == table2.partition and fig3["δ=0.5"].local == table2.local
    (probed,) = figures["fig4"].cells("paper")
    assert probed.config == fig3["δ=0.5"]
    rows = figures["fig4"].draw_with.keywords["rows"]
    table2_rows = {c.row.label: c.row for c in cells("fedssd", "table2").values()}
    assert [r.label for r in rows] == ["FedAvg", "FedSSD", "FedSSD (weight M)"]
    assert all(r.method == table2_rows[r.label].method and r.config == table2_rows[r.label].config for r in rows)

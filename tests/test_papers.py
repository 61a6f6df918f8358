"""Papers register themselves: a folder dropped into papers/ brings its methods, tables and
Snakemake targets, with nothing edited outside it."""
import subprocess
import sys
import textwrap

from shared.papers import paper_methods, paper_names
from tests.test_workflow import project, snakemake  # noqa: F401  (the fixture: a copy of the project)

NEW_PAPER = {
    "__init__.py": '''
        """A paper that is not part of the package."""
        METHODS = {"fedhalf": ".fedhalf:FedHalf"}
    ''',
    "fedhalf.py": '''
        """FedAvg whose clients minimise half the cross-entropy."""
        from dataclasses import dataclass

        import torch.nn.functional as F

        from shared.fedavg import FedAvg


        class FedHalf(FedAvg):
            @dataclass
            class Params:
                scale: float = 0.5

            def local_loss(self, model, x, y, client):
                return self.params.scale * F.cross_entropy(model(x), y)
    ''',
    "tables.py": '''
        from shared.experiments import MOON_CIFAR10, Column, Reported, Row, Table

        TABLES = [Table(
            paper="newpaper", name="table1", caption="FedHalf against FedAvg", base=MOON_CIFAR10,
            rows=[Row("FedAvg", {"name": "fedavg"}), Row("FedHalf", {"name": "fedhalf"})],
            columns=[Column("δ=0.5", {})], reported={"FedHalf": [Reported(70.0)]}, seeds=(0, 1))]
    ''',
}


def test_the_four_papers_are_found_with_their_methods():
    assert paper_names() == ("fedcad", "fedcsd", "fedgkd", "fedssd")
    assert paper_methods() == {"fedcad": "papers.fedcad.fedcad:FedCAD", "fedcsd": "papers.fedcsd.fedcsd:FedCSD",
                               "fedgkd": "papers.fedgkd.fedgkd:FedGKD", "fedssd": "papers.fedssd.fedssd:FedSSD"}


def test_a_dropped_in_paper_folder_is_a_target_with_its_method(project):  # noqa: F811
    folder = project / "papers" / "newpaper"
    folder.mkdir()
    for name, text in NEW_PAPER.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    try:
        printed = subprocess.run([sys.executable, "-m", "shared.run", "method=fedhalf", "--print-config"],
                                 cwd=project, capture_output=True, text=True)
        assert printed.returncode == 0 and "scale: 0.5" in printed.stdout, printed.stderr
        for target in ("papers/newpaper/table1", "newpaper"):
            dry = snakemake(project, "-n", "--config", "scale=smoke", "device=cpu", "--", target)
            assert dry.returncode == 0, dry.stderr + dry.stdout
            assert "run 4" in " ".join(dry.stdout.split()), dry.stdout  # 2 methods x 1 setting x 2 seeds
    finally:
        for path in sorted(folder.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        folder.rmdir()

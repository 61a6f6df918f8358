"""The basics of a paper package: a licence, a citation file, and each paper's link (DOI or arXiv)
in README.md, in the paper's own README and among CITATION.cff's references."""

import re
from pathlib import Path

import yaml

from shared.targets.papers import paper_names

ROOT = Path(__file__).resolve().parents[1]
LINK = r"\((https://(?:arxiv\.org/abs|doi\.org)/[^)]+)\)"


def test_each_paper_is_linked_from_both_readmes_and_cited():
    readme = (ROOT / "README.md").read_text()
    references = yaml.safe_load((ROOT / "CITATION.cff").read_text())["references"]
    cited = {f"https://doi.org/{r['doi']}" if "doi" in r else r["url"] for r in references}
    for paper in paper_names():
        header = (ROOT / "papers" / paper / "README.md").read_text().split("**Claim.**")[0]
        (link,) = re.findall(LINK, header)
        row = next(line for line in readme.splitlines() if f"(papers/{paper}/README.md)" in line)
        assert link in row and link in cited, paper
    assert len(cited) == len(paper_names())


def test_the_licence_is_declared_where_packaging_reads_it():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()
    assert yaml.safe_load((ROOT / "CITATION.cff").read_text())["license"] == "MIT"


def test_the_changelog_keeps_a_changelog_form():
    """CHANGELOG.md as keepachangelog.com lays it out: Unreleased first, then released versions
    with their dates, changes by kind; the measurements a change replaced, each with its date."""
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "keepachangelog.com" in text
    versions = re.findall(r"^## (.*)$", text, re.M)
    assert versions[0] == "[Unreleased]"
    assert all(re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", v) for v in versions[1:]), versions
    kinds = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security", "Measurement history"}
    assert set(re.findall(r"^### (.*)$", text, re.M)) <= kinds
    history = text.split("### Measurement history\n")[1].split("\n## ")[0]
    entries = [line for line in history.splitlines() if line.startswith("- ")]
    assert entries and all(re.match(r"- \d{4}-\d{2}-\d{2}, ", line) for line in entries)

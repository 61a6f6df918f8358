"""What a paper asks for: configs, experiments (tables, searches, figures), the runs a target needs.

Importing any of it registers the papers' own methods with the method registry (a floor below,
which cannot import the paper registry here): every process that resolves a config or a target
has imported this package before it looks a method up."""

from shared.methods.registry import register_methods
from shared.targets.papers import paper_methods

register_methods(paper_methods)

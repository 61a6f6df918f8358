"""The core of the package (README: Layout)."""
import importlib.util
import sys
from pathlib import Path

# PyYAML is the one run and test dependency that a site's CUDA Python often lacks (a GPU node
# without network: README, On a GPU machine without network); a vendored pure-Python copy
# stands in there, last on the path, so that an installed PyYAML always wins.
if importlib.util.find_spec("yaml") is None:
    sys.path.append(str(Path(__file__).resolve().parents[1] / "vendor"))

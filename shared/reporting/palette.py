"""How the series of a figure look, the same in every figure (shared/reporting/figure_style.py) and in the
learning curves (shared/curves.py, which draws beside training and so must not import torch:
this module imports nothing). Series i gets colour, marker and line style i; 7 markers and 4
line styles give 28 distinct (marker, line style) pairs (7 and 4 are coprime), so series are
told apart in black and white too."""

MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
LINESTYLES = ["-", "--", ":", "-."]
# seaborn's colour-blind palette, its light pink and yellow (too faint on white) replaced by
# black and a dark purple
COLOURS = ["#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#56b4e9", "#000000", "#949494", "#7b2d8e"]


def style(index: int) -> dict:
    """Series `index`'s colour, marker and line style (matplotlib keywords)."""
    return {
        "color": COLOURS[index % len(COLOURS)],
        "marker": MARKERS[index % len(MARKERS)],
        "linestyle": LINESTYLES[index % len(LINESTYLES)],
    }

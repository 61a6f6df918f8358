"""A paper's claim judged on a partial table (shipped runs of some methods and settings): the
claim cut to the cells the table has, its statement saying so, where that leaves a comparison
to make; a claim that needs a cut cell for every comparison waits for those runs."""

from __future__ import annotations

import dataclasses


def judged_part(claim, declared, table):
    """The claim on `table`'s cells: as it is where the table holds every cell it needs; a
    "best" claim (rows best against rivals, in columns: shared/reporting/claims.py's Best and
    its kinds) cut to the columns and rivals the table has, where its rows are there in each;
    else None (not measured yet)."""
    cells = {(r.label, c.label) for r in table.rows for c in table.columns}
    if set(claim.needed(declared)) <= cells:
        return claim
    if not hasattr(claim, "against"):  # a trend needs every one of its columns
        return None
    columns = [c for c in claim.column_labels(declared) if all((r, c) in cells for r in claim.rows)]
    rivals = [r for r in claim.rivals(declared) if all((r, c) in cells for c in columns)]
    if not columns or not rivals:
        return None
    return dataclasses.replace(
        claim,
        columns=tuple(columns),
        against=tuple(rivals),
        statement=f"{claim.statement} [judged on the cells this table holds: {', '.join(columns)}; "
        f"against {', '.join(rivals)}]",
    )

"""Translation of `sk.position(dim)`: the vector of the block's global indices along a dim,
which the edge masks compare with the dim's size, so a position costs what a mask costs.
The block form and a loop's step hold it, and the row form its columns' (a vector as wide
as the row, each chunk's own where the row is taken in chunks); the registry keeps it out of
the strided block, which has no per-row or per-column vectors."""

from collections.abc import Mapping

from ...ir.nodes import Kind, Mask, Name
from ...trace.body import Eqn
from .context import NotInForm, Rule, Support, Translator, Where

__all__ = ["POSITION_RULES"]


def _translate_position(tr: Translator, eqn: Eqn) -> None:
    axis = eqn.param("axis")
    if axis != 1 and tr.form() is Where.ROWS:
        raise NotInForm("a position along the rows is a per-row vector, which the row form lacks")
    positions = (Mask.ROW_POSITION, Mask.COL_POSITION, Mask.LOOP_POSITION)[axis]
    tr.masks.add(positions)
    out = eqn.outputs[0]
    tr.define(out, (Kind.ROW, Kind.COL, Kind.LOOP_COL)[axis], "int32")
    tr.aliases[out] = Name(positions)


POSITION_RULES: Mapping[str, Rule] = {
    "sk_position": Rule(
        _translate_position,
        support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.PARTLY)),
        note="along the columns in the row form (the row's own, a chunk's where the row is "
        "taken in chunks); along the rows, a per-row vector, only in the block form",
    )
}

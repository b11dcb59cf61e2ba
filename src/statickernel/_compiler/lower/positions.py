"""Translation of `sk.position(dim)`: the vector of the block's global indices along a dim,
which the edge masks compare with the dim's size, so a position costs what a mask costs.
The block form and a loop's step hold it; the registry keeps it out of the strided block and
the row form, which have no per-row or per-column vectors of positions."""

from collections.abc import Mapping

from ..ir.nodes import Kind, Mask, Name
from ..trace.body import Eqn
from .context import Rule, Support, Translator, Where

__all__ = ["POSITION_RULES"]


def _translate_position(tr: Translator, eqn: Eqn) -> None:
    axis = eqn.param("axis")
    positions = (Mask.ROW_POSITION, Mask.COL_POSITION, Mask.LOOP_POSITION)[axis]
    tr.masks.add(positions)
    out = eqn.outputs[0]
    tr.define(out, (Kind.ROW, Kind.COL, Kind.LOOP_COL)[axis], "int32")
    tr.aliases[out] = Name(positions)


POSITION_RULES: Mapping[str, Rule] = {
    "sk_position": Rule(
        _translate_position,
        support=((Where.STRIDED, Support.NO), (Where.ROWS, Support.NO)),
        note="positions are per-row or per-column vectors, which only the block form holds",
    )
}

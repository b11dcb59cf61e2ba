"""The constants a launch reads by their name: `stages`, the pipeline's stage count, and
`cluster`, whether the warp-specialized matmul runs in clusters of CTAs. A constant of one of
these names means that, so one of another type is an error rather than silently ignored."""

from typing import Any

from ..._errors import ConstantError
from .consts import ConstSpec, check_stage_count

__all__ = ["CLUSTER_CONST", "cluster_spec_of", "stage_spec_of"]

# `cluster: sk.Const[bool | None] = None`: None lets the plan choose, True takes clusters
# wherever the tiles allow them, False never.
CLUSTER_CONST = "cluster"


def stage_spec_of(
    stages: str | int | None, consts: list[ConstSpec], err: dict[str, Any]
) -> str | int:
    """The pipeline's stage count: a named int constant, a fixed int, or `stages` if declared."""
    names = {c.name: c for c in consts}
    if stages is None:
        if "stages" not in names:
            return 2
        # The name means the stage count: one of another type would be silently ignored.
        if not names["stages"].counts_stages:
            declared = names["stages"]
            raise ConstantError(
                "constant `stages` is the pipeline's stage count, which is an int",
                **err,
                constant="stages",
                expected="sk.Const[int] or sk.Const[int | None] (None fits the stages to "
                "shared memory)",
                actual=f"sk.Const[{declared.type.__name__}{' | None' if declared.optional else ''}]",
                fix="annotate it `stages: sk.Const[int] = 2`, or rename it if it means "
                "something else",
            )
        _check_stage_values(names["stages"], err)
        return "stages"
    if isinstance(stages, bool) or not isinstance(stages, int | str):
        raise ConstantError(
            "stages= must name an int constant or be a positive int",
            **err,
            actual=repr(stages),
            fix='write stages="stages" and declare `stages: sk.Const[int] = 3`',
        )
    if isinstance(stages, int):
        if stages < 1:
            raise ConstantError(
                "stages= must be at least 1",
                **err,
                actual=stages,
                fix="use stages=2 or more to overlap copies with compute",
            )
        return stages
    if stages not in names or not names[stages].counts_stages:
        raise ConstantError(
            f"stages= names {stages!r}, which is not an int constant of the kernel",
            **err,
            constant=stages,
            expected=f"one of {', '.join(c.name for c in consts if c.is_int) or '(none)'}",
            actual=repr(stages),
            fix=f"add a keyword-only parameter `{stages}: sk.Const[int] = 3`",
        )
    _check_stage_values(names[stages], err)
    return stages


def _check_stage_values(const: ConstSpec, err: dict[str, Any]) -> None:
    """The stage count's default and the values `sk.tune` lists are at least 1."""
    for value in (const.default, *const.candidates):
        check_stage_count(const.name, value, err, ConstantError)


def cluster_spec_of(consts: list[ConstSpec], err: dict[str, Any]) -> str | None:
    """`cluster` when the kernel declares that constant (a bool, or an optional one), else
    None: the plan then chooses."""
    declared = next((c for c in consts if c.name == CLUSTER_CONST), None)
    if declared is None:
        return None
    if declared.type is not bool:
        optional = " | None" if declared.optional else ""
        raise ConstantError(
            "constant `cluster` chooses whether the warp-specialized matmul runs in clusters "
            "of CTAs, which is a bool",
            **err,
            constant=CLUSTER_CONST,
            expected="sk.Const[bool | None] (None lets the plan choose) or sk.Const[bool]",
            actual=f"sk.Const[{declared.type.__name__}{optional}]",
            fix="annotate it `cluster: sk.Const[bool | None] = None`, or rename it if it "
            "means something else",
        )
    return CLUSTER_CONST

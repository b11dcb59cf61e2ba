"""Frozen facts as JSON: a launch plan, a check result, anything made of dataclasses, enums,
tuples and numbers, for `--json` on the command line.

The conversion is generic, so a field added to a plan appears in the JSON with no change
here: a dataclass becomes an object of its fields, an enum its value (its name when the value
is not a string or a number), a tuple or list a list, and a float that is not finite (NaN, an
infinity) null, since JSON has no such numbers. A plan shows its variant slots by the names
of the configs they hold (`LaunchPlan.json_keys`).
"""

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

from .._compiler.mosaic_gpu.plan.plan import LaunchPlan

__all__ = ["plan_to_json", "to_json"]


def to_json(value: Any) -> Any:
    """`value` as plain JSON values: dicts, lists, strings, numbers, booleans and None."""
    if isinstance(value, enum.Enum):
        inner = value.value
        return inner if isinstance(inner, str | int | float) else value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [to_json(v) for v in items]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    item = getattr(value, "item", None)  # a numpy or jax scalar, e.g. a fill value
    if callable(item):
        try:
            return to_json(item())
        except (TypeError, ValueError):
            pass
    return str(value)


def plan_to_json(plan: LaunchPlan) -> dict[str, Any]:
    """The plan's facts (its fields, each slot as the configs it holds), plus its form and
    the dims' sizes by name."""
    facts: dict[str, Any] = {key: to_json(getattr(plan, key)) for key in plan.json_keys()}
    facts["form"] = to_json(plan.form)
    facts["bindings"] = to_json(plan.bindings)
    return facts

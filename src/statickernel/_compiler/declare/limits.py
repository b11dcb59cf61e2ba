"""Launch limits that only the bound dims reveal: each dim must be one the target's index math
addresses (Mosaic GPU computes every position, block offset and TMA coordinate in int32, so a
dim stays within 2**31 - 1 elements).

The bound is the target's (`TargetLimits`), given by the compile path: the front imports no
back-end. The back-end's own launch limits (its block offsets and CUDA's grid) are checked by
its plan (`mosaic_gpu/launch_limits.py`).
"""

from ..._errors import ErrorContext, Int32LimitError
from ..._targets import TargetLimits

__all__ = ["check_dim_size", "index_limit_text"]


def index_limit_text(limits: TargetLimits) -> str:
    """The largest position, as messages give it: "2,147,483,647 (2**31 - 1)"."""
    return f"{limits.index_max:,} (2**{limits.index_bits - 1} - 1)"


def check_dim_size(
    dim: str,
    size: int,
    operand: str,
    axis: int,
    limits: TargetLimits,
    ctx: ErrorContext,
) -> None:
    """A dim's size must be a position the target's index math addresses."""
    if size <= limits.index_max:
        return
    raise ctx.error(
        Int32LimitError,
        f"dim {dim} has {size:,} elements, more than {limits.index_math} can address",
        operand=operand,
        dim=dim,
        expected=f"at most {index_limit_text(limits)} elements along every dim",
        actual=f"{dim}={size:,} (axis {axis} of `{operand}`)",
        fix=f"split the array along {dim} outside the kernel into pieces of at most "
        f"{limits.index_max:,} elements and call the kernel on each",
    )

"""The tensor cores a launch's products take, by its target, and what each can take.

Hopper (`sm_90a`) multiplies with WGMMA: a warpgroup issues it and the accumulator lives in
its registers. Blackwell (`sm_100a`) multiplies with tcgen05: one thread issues the MMA, the
accumulator lives in tensor memory (TMEM), and the epilogue loads it into registers once,
after the loop. The same `acc + sk.dot(a, b)` loop takes either (`emit.products`); this module
says which launches and blocks the tcgen05 form takes so far, and refuses the others with
what to change, before anything is lowered for the wrong architecture.
"""

from ...._errors import TensorCoreTargetError
from ...._targets import GpuTarget, TensorCores
from ...unit import ConstantRequest
from .. import hardware as hw
from .inputs import PlanInputs
from .pipelining import LoopPlan

__all__ = ["TCGEN05_DTYPES", "TCGEN05_N_MAX", "TCGEN05_ROWS", "check_products", "products_text"]

# A single-CTA tcgen05 MMA of M = 128 rows: the accumulator fills the 128 lanes of TMEM, and
# its load into registers is the TCGEN05 layout (a row a thread), the epilogue's layout.
TCGEN05_ROWS = 128
TCGEN05_N_UNIT = 16
# tcgen05 takes N up to 256, but the accumulator is loaded whole into one warpgroup's
# registers after the loop: 128 float32 columns are 128 registers a thread (256 spill).
TCGEN05_N_MAX = 128
# tcgen05 kinds f16 (bf16, f16) and f8f6f4 (fp8) into a float32 accumulator; Mosaic GPU
# takes no tf32 nor int8 kind here.
TCGEN05_DTYPES = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def products_text(target: GpuTarget, loops: tuple[LoopPlan, ...]) -> str:
    """The form line of a launch whose products are tcgen05's."""
    folded = sum(len(loop.dots) for loop in loops)
    step = sum(len(loop.products) for loop in loops)
    parts = []
    if folded:
        parts.append(
            f"{folded} accumulator(s) in tensor memory across the loop, loaded into registers "
            "after it"
        )
    if step:
        parts.append(
            f"{step} product(s) of a step, each into tensor memory and loaded back, a computed "
            "`a` staged in shared memory"
        )
    return (
        f"products by tcgen05 on {target.name}: " + "; ".join(parts) + "; each step's MMAs "
        "issued by one thread and waited for on a barrier; values in the TCGEN05 layout"
    )


def check_products(inputs: PlanInputs, loops: tuple[LoopPlan, ...]) -> ConstantRequest | None:
    """Raises TensorCoreTargetError where the target's tensor cores cannot take a product as
    the launch issues it; or, where the rows' tile constant is the call's default and a
    product needs 128 rows, asks for it: a kernel written with blocks of 64 rows for Hopper
    compiles unchanged for Blackwell, whose single-CTA MMA fills 128 lanes."""
    if inputs.target.tensor_cores is TensorCores.WGMMA:
        return None
    spec = inputs.spec
    for loop in loops:
        if loop.dots and loop.stops_early:
            _refuse(
                inputs,
                f"the loop over {loop.axis} has start= or stop=, and a tcgen05 accumulator "
                "starts from its first step's product",
                "a loop over every block of its dim",
                "sk.loop(..., start=, stop=) folding acc + sk.dot(a, b)",
                "walk every block (mask the products' operands instead), or compile for sm_90a",
            )
    cols = spec.cols or ""
    for block in inputs.loops:
        for dot in block.dots:
            request = _check_dot(inputs, dot.a, dot.b, inputs.dtypes[dot.a], cols, accumulator=True)
            if request is not None:
                return request
        for p in block.products:
            a, b = p.a or "a", p.b or "b"
            request = _check_dot(inputs, a, b, p.a_dtype, p.along, accumulator=False)
            if request is not None:
                return request
    return None


def _check_dot(
    inputs: PlanInputs, a: str, b: str, dtype: str, along: str, accumulator: bool
) -> ConstantRequest | None:
    spec, layout = inputs.spec, inputs.layout
    rows = layout.dim(spec.rows).extent
    cols = layout.dim(along).extent if along else 0
    what = f"sk.dot({a}, {b})"
    if dtype not in TCGEN05_DTYPES:
        _refuse(
            inputs,
            f"{what} takes {dtype} operands, which tcgen05 does not multiply here",
            " or ".join(TCGEN05_DTYPES),
            dtype,
            "cast the operands to bfloat16 outside the kernel, or compile for sm_90a",
            operand=a,
        )
    row_const = spec.tile_map.get(spec.rows, spec.rows)
    if rows != TCGEN05_ROWS:
        if row_const in inputs.narrowable:  # the call's default: ask for 128 by name
            return ConstantRequest(
                row_const,
                TCGEN05_ROWS,
                f"{row_const}={inputs.consts[row_const]} (its default) is {TCGEN05_ROWS} on "
                f"{inputs.target.name}: a single-CTA tcgen05 MMA fills the {TCGEN05_ROWS} "
                "lanes of tensor memory",
            )
        _refuse(
            inputs,
            f"{what}'s product has blocks of {rows} rows of {spec.rows}; a single-CTA "
            f"tcgen05 MMA fills the {TCGEN05_ROWS} lanes of tensor memory",
            f"{TCGEN05_ROWS} rows",
            f"{row_const}={rows}",
            f"set {row_const}={TCGEN05_ROWS}",
            dim=spec.rows,
        )
    if cols % TCGEN05_N_UNIT or cols > TCGEN05_N_MAX:
        const = spec.tile_map.get(along) or spec.loop_map.get(along) or along
        fixed = min(TCGEN05_N_MAX, hw.round_up(cols, TCGEN05_N_UNIT))
        where = "accumulator" if accumulator else "product"
        _refuse(
            inputs,
            f"{what}'s {where} has blocks of {cols} columns of {along}: a tcgen05 MMA takes a "
            f"multiple of {TCGEN05_N_UNIT}, and its result is loaded into a warpgroup's "
            f"registers whole, at most {TCGEN05_N_MAX} float32 columns",
            f"a multiple of {TCGEN05_N_UNIT}, at most {TCGEN05_N_MAX}",
            f"{const}={cols}",
            f"set {const}={fixed}" if const != along else f"walk {along} in a loop",
            dim=along,
        )
    return None


def _refuse(
    inputs: PlanInputs,
    what: str,
    expected: str,
    actual: str,
    fix: str,
    operand: str | None = None,
    dim: str | None = None,
) -> None:
    raise inputs.ctx.error(
        TensorCoreTargetError,
        f"{what} (target {inputs.target.name}, {inputs.target.gpus})",
        operand=operand,
        dim=dim,
        expected=expected,
        actual=actual,
        fix=fix,
    )

"""The names a generated module gives its own objects, and the check that keeps a declaration's
names clear of them.

The generated module binds its imports, the interpreter switch and the launch at module level;
inside the block function it names every operand's value after the operand, and derives more
locals from the operands, the results, the dims and the traced values. An operand (or a kernel)
named like one of them would shadow it, and the module would fail with a bare Python error.
Code generation spells its names with the functions below, so the two cannot drift apart.
"""

import dataclasses
import keyword
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..._errors import AnnotationError
from .nodes import Mask

__all__ = [
    "BLOCK_NAMES",
    "CHUNK",
    "CLUSTER",
    "CONSUMER_PAIR",
    "GIVEN_AROUND",
    "INDEXED_PARTS",
    "INDEX_MAP_STEP",
    "MMA_WARP",
    "MODULE_NAMES",
    "RAGGED",
    "WARP_SPECIALIZED",
    "ClusterLocals",
    "LocalNames",
    "RaggedLocals",
    "WarpSpecializedLocals",
    "accumulator_ref",
    "barrier_ref",
    "batch_entry",
    "block_function",
    "block_index",
    "check_names",
    "clash",
    "cluster_tile_index",
    "column_window_copy",
    "cta_tile_index",
    "gmem_ref",
    "indexed_loop",
    "indexed_part",
    "invalid_kernel_name",
    "loop_function",
    "loop_part",
    "ragged_item",
    "result_name",
    "row_form_first",
    "row_form_running",
    "row_form_update",
    "smem_ref",
    "suggest",
    "value_part",
]

# Module-level names of the generated module, and what each one is there.
MODULE_NAMES: Mapping[str, str] = {
    "jax": "the module's `import jax`",
    "jnp": "jax.numpy (`import jax.numpy as jnp`)",
    "lax": "jax.lax (`from jax import lax`)",
    "pl": "Pallas (`from jax.experimental import pallas as pl`)",
    "plgpu": "Pallas Mosaic GPU (`from jax.experimental.pallas import mosaic_gpu as plgpu`)",
    "np": "numpy, which generated modules may import",
    "INTERPRET": "the switch between the interpreter and the compiled kernel",
    "_launch": "the Pallas launch (`_launch = plgpu.kernel(...)`)",
    "range": "Python's range, which the passes over a row's chunks walk",
}


@dataclasses.dataclass(frozen=True)
class WarpSpecializedLocals:
    """The fixed locals of the warp-specialized block function; each is a key of
    `BLOCK_NAMES`, so that no operand may take one."""

    warpgroup: str = "wg"
    pipeline: str = "pipeline"
    pipeline_allocations: str = "pipeline_allocations"
    tiles: str = "tiles"
    tile: str = "tile"
    tile_info: str = "tile_info"
    tile_index: str = "tile_index"
    consumer: str = "consumer"
    run_pipeline: str = "run_pipeline"
    step: str = "step"
    indices: str = "indices"


@dataclasses.dataclass(frozen=True)
class ConsumerPairLocals:
    """The fixed local the block function of two consumers sharing a loop adds beside the
    warp-specialized ones (`wg`, `consumer`): a consumer's block of rows before it is brought
    inside them. A key of `BLOCK_NAMES`."""

    consumer_block: str = "consumer_block"


@dataclasses.dataclass(frozen=True)
class ClusterLocals:
    """The fixed local the warp-specialized block function adds in clusters of CTAs: the
    CTA's place in its cluster. A key of `BLOCK_NAMES`."""

    cta: str = "cluster_cta"


@dataclasses.dataclass(frozen=True)
class RaggedLocals:
    """The fixed locals the warp-specialized block function adds for ragged rows
    (`ragged=`): the walk of the groups, an item's group and rows, the ladder of row stores.
    Each is a key of `BLOCK_NAMES`."""

    group_rows: str = "group_rows"
    group: str = "group"
    first_row: str = "first_row"
    row_count: str = "row_count"
    store_rows: str = "store_rows"
    run_item: str = "run_item"


@dataclasses.dataclass(frozen=True)
class MmaWarpLocals:
    """The fixed locals the tcgen05 warp-specialized block function adds beside the
    warp-specialized ones (`wg`, `tiles`, `tile_info`, `tile_index`): its warps' roles,
    their loops, its ring of stages and its accumulators. Each is a key of `BLOCK_NAMES`."""

    warp: str = "warp"
    tma_and_mma: str = "tma_and_mma"
    per_warp: str = "per_warp"
    copy_blocks: str = "copy_blocks"
    multiply: str = "multiply"
    epilogue: str = "epilogue"
    copy_tile: str = "copy_tile"
    multiply_tile: str = "multiply_tile"
    epilogue_tile: str = "epilogue_tile"
    copy_step: str = "copy_step"
    mma_step: str = "mma_step"
    k_step: str = "k_step"
    ring_step: str = "ring_step"
    ring_slot: str = "ring_slot"
    drain: str = "drain"
    stage_free: str = "stage_free"
    accumulator_free: str = "accumulator_free"
    walked: str = "walked"
    accumulator: str = "acc_slot"
    accumulators: str = "accumulators"
    loaded: str = "loaded"
    consumed: str = "consumed"
    mma_done: str = "mma_done"
    acc_free: str = "acc_free"


WARP_SPECIALIZED = WarpSpecializedLocals()
MMA_WARP = MmaWarpLocals()
CLUSTER = ClusterLocals()
CONSUMER_PAIR = ConsumerPairLocals()
RAGGED = RaggedLocals()
# The parameter of the warp-specialized pipeline's index maps (`lambda k: (0, k)`): the K
# step. It is the lambda's own, so an operand of the same name is not shadowed.
INDEX_MAP_STEP = "k"

# The loop variable of the passes over a row's chunks (the row form, rows too wide for the
# registers).
CHUNK = "chunk"
# Fixed locals of the block function: edge masks and their positions, the traced zero that
# starts boxes wider than a whole dim, and the scoped store after the loops.
BLOCK_NAMES: Mapping[str, str] = {
    "edge_start": "the traced offset of boxes wider than a whole dim",
    "row_ok": "the row edge mask",
    "col_ok": "the column edge mask",
    "row_ok_vec": "the row edge mask of per-row vectors",
    "col_ok_vec": "the column edge mask of per-column vectors",
    "row_index": "the row positions of the edge mask",
    "col_index": "the column positions of the edge mask",
    "row_index_vec": "the row positions of the per-row edge mask",
    "col_index_vec": "the column positions of the per-column edge mask",
    "store_results": "the scoped store of the results after the loops",
    CHUNK: "the row form's chunk of a row's columns",
    "loop_index": "the positions of a loop step's edge mask",
    "loop_row_index": "the loop positions along the rows of a computed b of sk.dot",
    "loop_row_ok": "the loop edge mask of a computed b's rows",
    "loop_row_ok_vec": "the loop edge mask of a computed b's rows, as a vector",
    "loop_row_position": "the loop positions of a computed b's rows",
    # The warp-specialized matmul's warpgroups, pipeline and tile walk. (The persistent
    # launches' locals are given around the arrays: `GIVEN_AROUND`.)
    WARP_SPECIALIZED.warpgroup: "the warpgroup index of a warp-specialized launch",
    WARP_SPECIALIZED.pipeline: "the warp-specialized pipeline",
    WARP_SPECIALIZED.pipeline_allocations: "the warp-specialized pipeline's buffers",
    WARP_SPECIALIZED.tiles: "the scope of the warp-specialized tile walk",
    WARP_SPECIALIZED.tile: "one CTA tile of the warp-specialized walk",
    WARP_SPECIALIZED.tile_info: "the warp-specialized tile walk's loop index",
    WARP_SPECIALIZED.tile_index: "the warp-specialized CTA tile's linear index",
    WARP_SPECIALIZED.consumer: "a consumer warpgroup's part of a tile",
    WARP_SPECIALIZED.run_pipeline: "the warp-specialized pipeline, run by a consumer",
    WARP_SPECIALIZED.step: "a pipeline step",
    WARP_SPECIALIZED.indices: "a pipeline step's indices",
    CONSUMER_PAIR.consumer_block: "a consumer warpgroup's block of rows, past the last",
    MMA_WARP.warp: "the warp index inside the TMA and MMA warpgroup",
    MMA_WARP.tma_and_mma: "the warpgroup of the TMA warp and the MMA warp",
    MMA_WARP.per_warp: "the TMA and MMA warps' roles",
    MMA_WARP.copy_blocks: "the TMA warp's role",
    MMA_WARP.multiply: "the MMA warp's role",
    MMA_WARP.epilogue: "the epilogue warpgroup's role",
    MMA_WARP.copy_tile: "the TMA warp's copies of one tile",
    MMA_WARP.multiply_tile: "the MMA warp's products of one tile",
    MMA_WARP.epilogue_tile: "the epilogue of one tile",
    MMA_WARP.copy_step: "the TMA warp's copies of one K step",
    MMA_WARP.mma_step: "the MMA warp's product of one K step",
    MMA_WARP.k_step: "a K step of a tile",
    MMA_WARP.ring_step: "a K step counted over all of a CTA's tiles",
    MMA_WARP.ring_slot: "the stage a K step's blocks take",
    MMA_WARP.drain: "the waits for the last stages' products",
    MMA_WARP.stage_free: "the TMA warp's wait for a stage's last product",
    MMA_WARP.accumulator_free: "the MMA warp's wait for an accumulator's last load",
    MMA_WARP.walked: "the tiles a persistent CTA walks",
    MMA_WARP.accumulator: "the tensor-memory accumulator a tile takes",
    MMA_WARP.accumulators: "the tensor-memory accumulators",
    MMA_WARP.loaded: "the barriers of the stages' copies",
    MMA_WARP.consumed: "the barriers of the stages' products",
    MMA_WARP.mma_done: "the barriers of the accumulators' last products",
    MMA_WARP.acc_free: "the barriers of the accumulators read by the epilogue",
    CLUSTER.cta: "a CTA's index in its cluster",
    RAGGED.group_rows: "the walk of ragged groups that places an item",
    RAGGED.group: "a ragged item's group",
    RAGGED.first_row: "a ragged item's first row in its block",
    RAGGED.row_count: "a ragged item's rows in its block",
    RAGGED.store_rows: "the ladder of TMA stores of a ragged item's rows",
    RAGGED.run_item: "a ragged item's pipeline, run where it has rows",
}
# Locals a form's generator gives around the arrays' names (`LocalNames`): an operand may
# take one, and the generator then names its own `r_` (or `r__`, ...).
GIVEN_AROUND: Mapping[str, str] = {
    "r": "the row form's row counter",
    "row": "the row form's current row",
    "row_start": "the row form's first row of the block",
    "load_row": "the row form's copy of one row",
    "compute_row": "the row form's body for one row",
    "store_row": "the row form's store of one row",
    "store_inside": "the row form's store of a row inside the array",
    "block": "a persistent launch's block",
    "cta": "the persistent launch's CTA index",
    "trips": "the blocks a persistent CTA takes",
    "slot": "the shared-memory slot of a persistent step",
    "i": "a persistent CTA's step",
    "load_block": "a persistent launch's copies of one block",
    "refill": "a persistent launch's refill of a slot",
    "box": "a 1-D TMA box of a row the row form addresses flat",
    "load_boxes": "the row form's 1-D TMA boxes of one flat row",
    "piece": "a piece of a flat row stored from registers",
    "store_pieces": "the row form's stores of a flat row's pieces",
    "piece_values": "a piece of a flat row in registers",
}
# The locals of the copies of an array's rows an index picks, by the part they name.
INDEXED_PARTS = ("row", "index", "inside", "at", "store")

# Families of generated locals.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"v\d+(?:_\w+)?"), "a value the body computes (v0, v1, v0_acc, ...)"),
    (re.compile(r"loop\d+(?:_\w*)?"), "a loop's pipeline (loop0, loop0_step, loop0_carry, ...)"),
    (re.compile(r"result\d*"), "a result (the results are named result, or result0, result1, ...)"),
    (re.compile(r"fill_slot_\d+"), "a persistent launch's first copies"),
    (re.compile(r"tile_\w+"), "a CTA tile's index along a dim (tile_M, ...)"),
    (re.compile(r"cluster_tile_\w+"), "a cluster tile's index along a dim (cluster_tile_M)"),
    (re.compile(r"item_\w+"), "a ragged walk's item along the rows (item_M)"),
    (re.compile(r"walk_\w+"), "the locals of the walk of ragged groups (group_rows)"),
    (re.compile(r"ladder_\w+"), "the ladder of a ragged item's row stores and its locals"),
    (re.compile(r"\w+_entry"), "an array's batch entry in the warp-specialized walk"),
    (
        re.compile(r"\w+_window_[mp]\d+_(?:first|rest)"),
        "the copies of a column-shifted window (x_window_m3_first, x_window_m3_rest)",
    ),
)


def gmem_ref(name: str) -> str:
    """The block function's parameter for an array in global memory."""
    return f"{name}_gmem"


def smem_ref(name: str) -> str:
    """The block function's shared-memory buffer for an array's block."""
    return f"{name}_smem"


def column_window_copy(array: str, offset: int) -> str:
    """The stem of the guarded copies of an array's window at a column offset, for the
    interpreter: `x_window_m3` (offset -3), `x_window_p2` (offset 2)."""
    return f"{array}_window_{'m' if offset < 0 else 'p'}{abs(offset)}"


def barrier_ref(name: str) -> str:
    """The barrier an operand's copy into shared memory arrives on."""
    return f"{name}_barrier"


def block_index(dim: str) -> str:
    """The block function's index of this grid step's block along a tiled or batch dim."""
    return f"block_{dim}"


def loop_function(index: int) -> str:
    """A loop's name: its accumulation scope (`loop0`), and the first part of its pipeline's
    locals (`loop0_step`, `loop0_carry`, ...)."""
    return f"loop{index}"


def loop_part(loop: str, part: str) -> str:
    """A local of a loop's pipeline: `loop0_step`, `loop0_carry`, `loop0_x_spec`, ..."""
    return f"{loop}_{part}"


def value_part(var: str, part: str) -> str:
    """A local derived from a value the body computes: `v3_product`, `v3_nans`, ..."""
    return f"{var}_{part}"


def row_form_running(array: str) -> str:
    """The row form's running value of a per-column result: what the rows so far summed."""
    return f"{array}_so_far"


def row_form_first(array: str) -> str:
    """The row form's first entry of a per-column result: where a CTA's rows start."""
    return f"{array}_start"


def row_form_update(array: str) -> str:
    """The row form's guarded update of a per-column result by one row."""
    return f"add_{array}"


def accumulator_ref(var: str) -> str:
    """The WGMMA accumulator ref of a carry or product: `v0_acc` for the value `v0`."""
    return value_part(var, "acc")


def ragged_item(dim: str) -> str:
    """The warp-specialized walk's item along ragged rows: `item_M`."""
    return f"item_{dim}"


def cta_tile_index(dim: str) -> str:
    """The warp-specialized walk's index of the CTA tile along a dim: `tile_M`, `tile_N`."""
    return f"tile_{dim}"


def cluster_tile_index(dim: str) -> str:
    """The clustered walk's index of the cluster tile along a dim: `cluster_tile_M`."""
    return f"cluster_tile_{dim}"


def batch_entry(name: str) -> str:
    """An array's entry of the batch the warp-specialized walk is at: `a_entry`."""
    return f"{name}_entry"


def indexed_part(array: str, part: str) -> str:
    """A local of the copies of an array whose rows an index picks: `table_row` (the loop's
    row), `table_index` (the id read), `table_inside` (whether it is a row of the array),
    `table_at` (the row a gather copies), `result_store` (a scatter's guarded copy)."""
    return f"{array}_{part}"


def indexed_loop(array: str, verb: str) -> str:
    """The loop that copies an array's rows an index picks: `gather_table`, `scatter_result`."""
    return f"{verb}_{array}"


def result_store(array: str, which: str) -> str:
    """A result's guarded store of its block: `result_store_whole` (a block inside its batch
    entry) or `result_store_edge` (the entry's last block, its rows inside alone)."""
    return f"{array}_store_{which}"


def result_name(index: int, is_tuple: bool) -> str:
    """A result's name: `result`, or `result0`, `result1`, ... for a tuple of results."""
    return f"result{index}" if is_tuple else "result"


def _derived(arrays: Iterable[str], dims: Iterable[str]) -> dict[str, str]:
    """The locals derived from the arrays and dims of one kernel, and what each one is."""
    names: dict[str, str] = {}
    for array in arrays:
        names[gmem_ref(array)] = f"`{array}` in global memory"
        names[smem_ref(array)] = f"the shared-memory block of `{array}`"
        names[barrier_ref(array)] = f"the copy barrier of `{array}`"
        # The row form's per-column results: what the rows so far summed, where a CTA's
        # rows start, and the guarded add of a row.
        names[row_form_running(array)] = f"the row form's running value of `{array}`"
        names[row_form_first(array)] = f"the row form's first entry of `{array}`"
        names[row_form_update(array)] = f"the row form's guarded update of `{array}`"
        # The copies of rows an index picks (`index=`): their loop and its locals.
        for part in INDEXED_PARTS:
            names[indexed_part(array, part)] = f"the {part} of a row of `{array}` an index picks"
        for which in ("whole", "edge"):
            names[result_store(array, which)] = f"the guarded store of a block of `{array}`"
        for verb in ("gather", "scatter"):
            names[indexed_loop(array, verb)] = f"the loop that {verb}s the rows of `{array}`"
    for dim in dims:
        names[block_index(dim)] = f"the block index along dim {dim}"
    return names


# The edge masks and the positions they compare, named by the IR's `Mask`.
_MASK_NAMES: Mapping[str, str] = {m.value: f"the edge mask or positions `{m.value}`" for m in Mask}


@dataclasses.dataclass(frozen=True)
class LocalNames:
    """The locals one generated module gives itself where an array's name may take them
    (`GIVEN_AROUND`): each is its usual name unless an operand or result, or a name derived
    from one, already is; then the first free of `name_`, `name__`, ..."""

    taken: frozenset[str]

    @classmethod
    def around(cls, arrays: Iterable[str], dims: Iterable[str]) -> "LocalNames":
        arrays = list(arrays)
        return cls(frozenset(arrays) | frozenset(_derived(arrays, dims)))

    def local(self, name: str) -> str:
        assert name in GIVEN_AROUND, f"{name} is not a local given around the arrays"
        given = name
        while given in self.taken or (given != name and _reserved(given) is not None):
            given += "_"
        return given


def _reserved(name: str) -> str | None:
    if name in MODULE_NAMES:
        return MODULE_NAMES[name]
    if name in BLOCK_NAMES:
        return BLOCK_NAMES[name]
    if name in _MASK_NAMES:
        return _MASK_NAMES[name]
    for pattern, what in _PATTERNS:
        if pattern.fullmatch(name):
            return what
    return None


def block_function(kernel: str) -> str:
    """The generated module's block function: what `_launch` runs for every block."""
    return f"_{kernel}_block"


def clash(
    operands: Iterable[str], results: Iterable[str], dims: Iterable[str], kernel: str = ""
) -> tuple[str, str] | None:
    """The first operand whose name the generated module also gives something else, and what."""
    operands, results = list(operands), list(results)
    derived = _derived(operands + results, dims)
    if kernel:
        derived[block_function(kernel)] = f"the block function of kernel `{kernel}`"
    for name in operands:
        what = _reserved(name) or derived.get(name)
        if what is not None:
            return name, what
    return None


def suggest(name: str, operands: Iterable[str], results: Iterable[str], dims: Iterable[str]) -> str:
    """A free name close to `name`: `name_`, else `name_in`, else `my_name` with underscores
    appended until nothing uses it."""
    operands, results = list(operands), list(results)
    taken = set(operands) | set(results) | set(_derived([*operands, *results], dims))

    def free(candidate: str) -> bool:
        return candidate not in taken and _reserved(candidate) is None

    candidate = next((c for c in (f"{name}_", f"{name}_in") if free(c)), f"my_{name}")
    while not free(candidate):
        candidate += "_"
    return candidate


def invalid_kernel_name(name: object) -> str | None:
    """Why `name` cannot name the generated module's kernel function, or None if it can."""
    if not isinstance(name, str) or not name.isidentifier():
        return "it is not a Python identifier"
    if keyword.iskeyword(name):
        return "it is a Python keyword"
    if name in MODULE_NAMES:
        return f"the generated module already binds it to {MODULE_NAMES[name]}"
    return None


def check_names(
    kernel: Any, operands: list[str], results: list[str], dims: list[str], err: Mapping[str, Any]
) -> None:
    """Refuses a kernel or operand name that the generated module would shadow or misread."""
    why = invalid_kernel_name(kernel)
    if why is not None:
        raise AnnotationError(
            f"the kernel cannot be named {kernel!r}: {why}",
            **err,
            expected="a Python identifier that the generated module does not use itself (not "
            + ", ".join(MODULE_NAMES)
            + ")",
            actual=repr(kernel),
            fix="pass another name=, e.g. "
            + (
                f"name={kernel + '_kernel'!r}"
                if isinstance(kernel, str) and (kernel + "_kernel").isidentifier()
                else "name='my_kernel'"
            ),
        )
    found = clash(operands, results, dims, kernel if isinstance(kernel, str) else "")
    if found is None:
        return
    name, what = found
    raise AnnotationError(
        f"operand `{name}` has a name that the generated Pallas module gives {what}",
        **err,
        operand=name,
        expected="a name the generated module does not use: not "
        + ", ".join(MODULE_NAMES)
        + ", a mask or offset (row_ok, col_ok, row_index, edge_start, ...), store_results, "
        "the persistent and warp-specialized launches' locals (step, fill_slot_<N>, wg, "
        "tile, consumer, ...), v<N>..., loop<N>... or result<N>, nor another array's "
        "<name>_gmem, <name>_smem, <name>_barrier, <name>_so_far, <name>_start, "
        "<name>_store_whole, <name>_store_edge or add_<name>, nor a dim's block_<dim>, nor the block function _<kernel>_block",
        actual=f"`{name}`: {what}",
        fix=f"rename `{name}` in the signature and the body, e.g. to "
        f"`{suggest(name, operands, results, dims)}`",
    )

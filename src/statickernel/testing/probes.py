"""What a kernel is checked at: probe shapes derived from its tiling (aligned, ragged on each
tiled dim, ragged on the whole dims, smaller than one block) and the dtypes its annotations
allow, combined into cases."""

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtypes
from .._compiler.build import compile_declaration
from .._compiler.declare.blocks import split_blocks
from .._compiler.declare.spec import KernelSpec
from .._compiler.mosaic_gpu import hardware as hw
from .._compiler.mosaic_gpu.layout.blocks import call_layout
from .._compiler.mosaic_gpu.layout.smem import smem_bytes
from .._compiler.mosaic_gpu.lower.slices import SLICE_RULES
from .._compiler.trace.body import Atom, Eqn, Step
from .._errors import NotAKernelError
from .._where import call_site
from ..runtime.kernel import Kernel

__all__ = [
    "ProbeCase",
    "ProbeShape",
    "ShapeSpec",
    "dtype_text",
    "probe_cases",
    "probe_dtypes",
    "probe_shapes",
    "require_kernel",
    "shapes_text",
]

# A shape to check: dim sizes by name ({"M": 100, "N": 30}), or one shape per operand.
ShapeSpec: TypeAlias = Mapping[str, int] | Sequence[Sequence[int]]

# Whole (untiled) dims at the aligned probe: one WGMMA row tile, or 128 columns. They are
# halved while the blocks would not fit in shared memory.
_WHOLE_ALIGNED = {"rows": hw.WGMMA_ROWS, "cols": 128}
# Whole dims at the "smaller than one block" probe: a few rows, and a row of a few elements
# (too few bytes for TMA, so host padding is exercised as well).
_WHOLE_SMALL = {"rows": 3, "cols": 5}
# The columns of a sliced whole dim at the ragged and small probes: halves and quarters of
# them lie on the register layout's 8-column tiles.
_SLICED_COLUMNS = 4 * hw.WGMMA_COLS
# The dtypes each kernel is checked in by default, where its annotations allow them.
_DEFAULT_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class ProbeShape:
    """Dim sizes to check a kernel at, with a label saying which edge they exercise."""

    label: str
    dims: tuple[tuple[str, int], ...]

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.dims)

    def __str__(self) -> str:
        return f"{self.label} ({', '.join(f'{d}={n}' for d, n in self.dims)})"


@dataclasses.dataclass(frozen=True)
class ProbeCase:
    """One run of a check: a label, one shape and one dtype per operand."""

    label: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    index_bounds: tuple[int | None, ...] = ()
    """For each index operand (`index={"V": "ids"}`), the size of the dim its values address
    (its data are drawn mostly inside it), and for a scalar that stops a loop (`stop=` of
    `sk.load(lengths)`), the loop dim's size; None for every other operand."""
    unique_indices: tuple[bool, ...] = ()
    """For each operand, whether it is an index that scatters a result's rows: its values
    are drawn without repeats, since two rows written to one row leave either."""
    group_rows: tuple[int | None, ...] = ()
    """For each operand of ragged groups' sizes (`ragged=`), the rows its groups split: the
    sizes are drawn as a split of at most those rows; None for every other operand."""

    def structs(self) -> tuple[jax.ShapeDtypeStruct, ...]:
        return tuple(
            jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
            for shape, dtype in zip(self.shapes, self.dtypes, strict=True)
        )

    def describe(self) -> str:
        return f"{self.label}, {shapes_text(self.shapes)} {dtype_text(self.dtypes)}"


def require_kernel(kernel: object, function: str) -> None:
    """Refuses anything but a kernel where `sk.testing.<function>` needs one: it reads the
    kernel's declaration (its annotations, tiling and reference), which a plain function lacks."""
    if isinstance(kernel, Kernel):
        return
    name = getattr(kernel, "__name__", None)
    if callable(kernel) and isinstance(name, str):  # named, not shown by its address
        given, actual = f"the plain function `{name}`", f"{type(kernel).__name__} `{name}`"
    else:
        given, actual = f"a value of type {type(kernel).__name__}", repr(kernel)[:80]
    raise NotAKernelError(
        f"sk.testing.{function} needs a kernel, and was given {given}",
        where=call_site(),
        expected="a kernel: a function decorated with @sk.kernel(...)",
        actual=actual,
        fix="decorate the function with @sk.kernel(...), annotating its operands and result "
        '(e.g. x: Float[Array, "M N"]), and pass the kernel',
    )


def probe_shapes(kernel: Kernel) -> list[ProbeShape]:
    """Dim sizes that exercise each edge case of the kernel's tiling, at its current constants.

    Tiled and loop dims are 2 blocks (aligned), 2 blocks + 1 (ragged) and half a block + 1
    (smaller than one block); batch dims are 2, and 1 in the smallest case; whole dims are 128
    columns or 64 rows (aligned), three quarters of that minus one (ragged), and 5 columns or 3
    rows (small).
    """
    require_kernel(kernel, "probe_shapes")
    spec = kernel.spec
    # Loop dims have edges like tiled ones: the last step of the loop is partly past the edge.
    tile = spec.block_map
    blocks = split_blocks(spec, kernel.consts)
    batch = set(spec.batch)
    # A dim named by its size ("3", a vector of parameters) is that size in every probe.
    fixed = spec.fixed_sizes()
    groups = spec.group_map  # one index per step of its loop: sized by that loop's dim
    # A ragged rows' group dim counts groups: a few, more than one.
    ragged_groups = spec.ragged_groups
    whole = [
        d
        for d in spec.dim_names()
        if d not in tile
        and d not in batch
        and d not in fixed
        and d not in groups
        and d not in ragged_groups
    ]
    aligned_whole = {**_fitting_whole_sizes(kernel, blocks, whole), **fixed}
    aligned = {
        d: 2 if d in batch else (2 * blocks[d] if d in tile else aligned_whole.get(d, 1))
        for d in spec.dim_names()
    }
    candidates = [ProbeShape("aligned", tuple(aligned.items()))]
    for d in tile:
        candidates.append(
            ProbeShape(f"ragged {d}", tuple((aligned | {d: 2 * blocks[d] + 1}).items()))
        )
    # A body that slices its blocks' columns does so at fractions of the dim (halves for
    # RoPE), which must lie on the register tiles: that dim takes multiples of 32.
    sliced = spec.cols if spec.cols in whole and _slices_columns(kernel) else None
    # A whole dim holds at least a dim a constant sizes (the K of a top-k over it).
    least = max((int(kernel.consts[d]) for d in spec.const_dims), default=1)
    if whole:
        ragged = {d: max(least, aligned_whole[d] - aligned_whole[d] // 4 - 1) for d in whole}
        # A dim an index addresses is no block's: its probe is only a size of the array.
        indexed = [d for d in whole if d in dict(spec.index)]
        plain = [d for d in whole if d not in indexed]
        parts = [f"{' '.join(indexed)} (indexed)"] if indexed else []
        parts += [f"{' '.join(plain)} (whole)"] if plain else []
        label = f"ragged {', '.join(parts)}"
        if sliced is not None:
            ragged[sliced] = hw.round_up(ragged[sliced], _SLICED_COLUMNS)
            label = (
                f"{label[:-1]}; {sliced} a multiple of {_SLICED_COLUMNS}, which the body slices)"
            )
        candidates.append(ProbeShape(label, tuple((aligned | ragged).items())))
    small = {
        d: 1
        if d in batch
        else (blocks[d] // 2 + 1 if d in tile else max(least, _WHOLE_SMALL[_axis(spec, d)]))
        for d in spec.dim_names()
    } | fixed
    if sliced is not None:
        small[sliced] = _SLICED_COLUMNS
    candidates.append(ProbeShape("smaller than one block", tuple(small.items())))
    candidates = _joinable(kernel, candidates)
    unique: dict[tuple[tuple[str, int], ...], ProbeShape] = {}
    for probe in candidates:
        sizes = dict(probe.dims)
        for group in ragged_groups:  # 4 groups; 3 where an edge is probed, 2 in the smallest
            small_probe = probe.label == "smaller than one block"
            sizes[group] = 2 if small_probe else (3 if probe.label.startswith("ragged") else 4)
        for group, walked in groups.items():
            if group in spec.page_tables:
                _page_sizes(spec, sizes, group, walked, blocks[walked], probe.label)
                continue
            sizes[group] = hw.cdiv(sizes[walked], blocks[walked])
        probe = dataclasses.replace(probe, dims=tuple(sizes.items()))
        unique.setdefault(probe.dims, probe)
    return list(unique.values())


def _joinable(kernel: Kernel, probes: list[ProbeShape]) -> list[ProbeShape]:
    """The probes with the parts of each joined dim on the register tiles where the body
    needs them: every part a multiple of 32 where the body slices them (at fractions, as
    RoPE halves). Parts of any widths join (a block holds them apart where they must be)."""
    spec = kernel.spec
    if not spec.joined:
        return probes
    sliced = any(
        eqn.prim in SLICE_RULES and eqn.prim != "concatenate" for eqn in _declared_eqns(kernel)
    )
    if not sliced:
        return probes
    units = {part: _SLICED_COLUMNS for _, parts in spec.joined for part in parts}
    return [
        dataclasses.replace(
            probe,
            dims=tuple((d, hw.round_up(n, units[d]) if d in units else n) for d, n in probe.dims),
        )
        for probe in probes
    ]


def _page_sizes(
    spec: KernelSpec, sizes: dict[str, int], group: str, walked: str, block: int, label: str
) -> None:
    """A paged loop's probe: pages of one block, or of half a block (a multiple of 8 rows)
    where its edge is probed, so that a table of an odd length ends in a part of a block;
    a pool of twice the table's pages."""
    half = block // 2
    ragged = label == f"ragged {walked}" and half % 8 == 0
    sizes[walked] = half if ragged else block
    steps = spec.paged_loops[walked]
    if ragged:
        sizes[steps] = 2 * (sizes[steps] // 2) + 1
    sizes[group] = 2 * sizes[steps]


def _slices_columns(kernel: Kernel) -> bool:
    """Whether the body slices, splits or joins blocks (its declaration's trace says)."""
    return any(eqn.prim in SLICE_RULES for eqn in _declared_eqns(kernel))


def _declared_eqns(kernel: Kernel) -> Iterator[Eqn]:
    """The equations of the body's trace at the declaration, those of loop steps included."""

    def walk(eqns: Sequence[Eqn]) -> Iterator[Eqn]:
        for eqn in eqns:
            yield eqn
            for step in (v for _, v in eqn.params if isinstance(v, Step)):
                yield from walk(step.eqns)

    return walk(compile_declaration(kernel.spec, kernel.consts).trace.eqns)


def _axis(spec: KernelSpec, dim: str) -> str:
    return "rows" if dim == spec.rows else "cols"


def _fitting_whole_sizes(
    kernel: Kernel, blocks: Mapping[str, int], whole: Sequence[str]
) -> dict[str, int]:
    """Aligned sizes for the whole dims, halved until the blocks fit in shared memory with the
    widest dtypes the annotations allow (a whole dim is whole in every block)."""
    spec = kernel.spec
    sizes = {d: _WHOLE_ALIGNED[_axis(spec, d)] for d in whole}
    widest = {o.name: _dtypes.widest(o.dtypes) for o in spec.operands + spec.results}
    loaded = {o.name for o in spec.operands}
    batch = {d: 1 for d in spec.batch}
    # One step's (or one block's) index: its block is 1 either way.
    groups = {d: 1 for d in (*spec.group_map, *spec.ragged_groups)}
    fixed = spec.fixed_sizes()
    while True:
        dims = {**batch, **groups, **fixed, **blocks, **sizes}
        dims.update(spec.joined_sizes(dims))
        layout = call_layout(spec, dims, kernel.consts, widest)
        if smem_bytes(spec, layout, widest, loaded) <= hw.SMEM_BYTES:
            return sizes
        largest = max(sizes, key=lambda d: sizes[d], default=None)
        if largest is None or sizes[largest] <= hw.WGMMA_COLS:
            return sizes  # the tiled blocks alone overflow; the plan will say so
        sizes[largest] //= 2


def probe_dtypes(kernel: Kernel, dtypes: Sequence[Any] | None = None) -> list[tuple[str, ...]]:
    """One dtype per operand for each dtype to check: float32, and bfloat16 where allowed.

    An operand whose annotation does not allow a checked dtype keeps its first allowed one
    (e.g. an int32 index next to float data). A dtype no operand allows is skipped, unless it
    was asked for explicitly, which raises ValueError.
    """
    require_kernel(kernel, "probe_dtypes")
    spec = kernel.spec
    wanted = [jnp.dtype(d).name for d in dtypes] if dtypes is not None else list(_DEFAULT_DTYPES)
    configs: list[tuple[str, ...]] = []
    for name in wanted:
        if not any(name in o.dtypes for o in spec.operands):
            if dtypes is not None:
                allowed = sorted({d for o in spec.operands for d in o.dtypes})
                raise ValueError(
                    f"kernel `{spec.name}` has no operand that allows {name}; its annotations "
                    f"allow {', '.join(allowed)}"
                )
            continue
        config = tuple(name if name in o.dtypes else o.dtypes[0] for o in spec.operands)
        if config not in configs:
            configs.append(config)
    return configs or [tuple(o.dtypes[0] for o in spec.operands)]


def probe_cases(
    kernel: Kernel,
    shapes: Sequence[ShapeSpec] | None = None,
    dtypes: Sequence[Any] | None = None,
) -> list[ProbeCase]:
    """Every (shape, dtypes) pair to check: the probe shapes, or `shapes`, in each dtype."""
    require_kernel(kernel, "probe_cases")
    spec = kernel.spec
    if shapes is None:
        labelled = [
            (p.label, tuple(tuple(p.sizes[d] for d in o.dims) for o in spec.operands))
            for p in probe_shapes(kernel)
        ]
    else:
        labelled = [("given", _operand_shapes(spec, s)) for s in shapes]
    configs = probe_dtypes(kernel, dtypes)
    stops = _loop_stops(kernel)
    return [
        ProbeCase(
            label,
            s,
            config,
            _index_bounds(spec, s, stops),
            _unique_indices(spec),
            _group_rows(spec, s),
        )
        for config in configs
        for label, s in labelled
    ]


def _loop_stops(kernel: Kernel) -> dict[str, str]:
    """The integer scalar operands that stop a loop as they are (`stop=sk.load(lengths)`), and
    the loop's dim: their values are positions along it (a sequence's length)."""
    operands = {o.name for o in kernel.spec.operands}
    stops: dict[str, str] = {}
    for eqn in _declared_eqns(kernel):
        params = dict(eqn.params)
        stop = params.get("stop")
        if isinstance(stop, Atom) and stop.var in operands:
            stops[stop.var] = params["axis"]
    return stops


def _group_rows(spec: KernelSpec, shapes: tuple[tuple[int, ...], ...]) -> tuple[int | None, ...]:
    """The rows each operand of ragged groups' sizes splits, at these shapes."""
    if not spec.ragged:
        return ()
    sizes = {
        d: n
        for o, shape in zip(spec.operands, shapes, strict=True)
        for d, n in zip(o.dims, shape, strict=True)
    }
    split = {name: sizes[dim] for dim, name in spec.ragged}
    return tuple(split.get(o.name) for o in spec.operands)


def _unique_indices(spec: KernelSpec) -> tuple[bool, ...]:
    """Whether each operand is an index that scatters a result's rows."""
    scattering = {r.indexed.index for r in spec.results if r.indexed is not None}
    return tuple(o.name in scattering for o in spec.operands) if scattering else ()


def _index_bounds(
    spec: KernelSpec, shapes: tuple[tuple[int, ...], ...], stops: Mapping[str, str]
) -> tuple[int | None, ...]:
    """The size of the dim each index operand addresses, or each loop-stopping scalar's loop
    walks (a paged loop's: the table's pages times a page), at these shapes; None for others."""
    if not spec.index and not stops:
        return ()
    sizes = {
        d: n
        for o, shape in zip(spec.operands, shapes, strict=True)
        for d, n in zip(o.dims, shape, strict=True)
    }
    addressed = {name: sizes[dim] for dim, name in spec.index if name not in stops}
    paged = spec.paged_loops
    for name, axis in stops.items():
        addressed[name] = sizes[axis] * (sizes[paged[axis]] if axis in paged else 1)
    return tuple(addressed.get(o.name) for o in spec.operands)


def _operand_shapes(spec: KernelSpec, shape: ShapeSpec) -> tuple[tuple[int, ...], ...]:
    if isinstance(shape, Mapping):
        missing = [d for d in spec.dim_names() if d not in shape]
        if missing:
            raise ValueError(
                f"kernel `{spec.name}`: the shape {dict(shape)} does not size dim(s) "
                f"{', '.join(missing)}"
            )
        sizes = {d: _dim_size(spec, f"dim {d}", shape[d]) for d in spec.dim_names()}
        return tuple(tuple(sizes[d] for d in o.dims) for o in spec.operands)
    if len(shape) != len(spec.operands):
        raise ValueError(
            f"kernel `{spec.name}` takes {len(spec.operands)} operand(s) "
            f"({', '.join(o.name for o in spec.operands)}) but {len(shape)} shape(s) were given"
        )
    return tuple(
        tuple(_dim_size(spec, f"dim {i} of operand {o.name}", n) for i, n in enumerate(s))
        for o, s in zip(spec.operands, shape, strict=True)
    )


def _dim_size(spec: KernelSpec, what: str, size: Any) -> int:
    """A given dim size as an int: int() would take 3.7 as 3 and True as 1."""
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ValueError(
            f"kernel `{spec.name}`: {what} is {size!r}, but a shape to check takes a positive "
            f"int for each dim (e.g. 100)"
        )
    return int(size)


def shapes_text(shapes: Sequence[tuple[int, ...]]) -> str:
    return " ".join("[" + ",".join(str(n) for n in s) + "]" for s in shapes)


def dtype_text(dtypes: Sequence[str]) -> str:
    return "/".join(dict.fromkeys(dtypes))

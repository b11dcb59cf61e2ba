"""Declaration: a decorated function becomes a frozen, checked `KernelSpec`.

Everything here runs when the decorator runs, before any data exists. Each check raises a
`DeclarationError` that points at the user's decorator line.
"""

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ..._errors import AnnotationError, TilingError
from ..._where import call_site, display_path, source_location
from ..ir.names import check_names, result_name
from .arrays import array_spec
from .consts import Const, ConstSpec, const_spec, type_name
from .declaration import Blocking, Declaration
from .dims import (
    check_batch,
    check_const_dims,
    check_derivable,
    check_stacked_params,
    const_dims,
)
from .dtypes import check_packed_operands
from .groups import apply_groups
from .indexing import apply_index
from .joined import check_joined, frame_beside_parts, joined_dims
from .launch_consts import cluster_spec_of, stage_spec_of
from .operand import OperandSpec
from .pages import apply_pages, check_pages_map
from .ragged import apply_ragged, check_ragged_rows, ragged_group_dims
from .test_data import check_test_data
from .updates import check_update

__all__ = [
    "Const",
    "ConstSpec",
    "KernelSpec",
    "OperandSpec",
    "build_spec",
    "display_path",
    "source_location",
]

# Parameter names the call path reserves for itself.
RESERVED_NAMES = frozenset({"backend", "target"})


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """The canonical form of a declaration.

    Invariants: every operand is rank 1 or 2, or 0 (a scalar); the 2-D operands and results
    share one dim order (`rows`, `cols`); every 1-D one is along `rows` or `cols`; every tiled
    dim is declared and tiled by an int constant; every result dim comes from an operand, an
    int constant that sizes it, or a sum of operand dims (`joined`: the columns). A
    result may lack a tiled dim, or be a scalar: it is then reduced across blocks
    (`trace.crossblock`).
    """

    name: str
    fn: Callable[..., Any]
    location: str
    operands: tuple[OperandSpec, ...]
    results: tuple[OperandSpec, ...]
    result_is_tuple: bool
    consts: tuple[ConstSpec, ...]
    tile: tuple[tuple[str, str], ...]
    rows: str
    cols: str | None
    reference: Callable[..., Any] | None
    loop: tuple[tuple[str, str], ...] = ()
    """Loop dims, walked in sequence inside each block, and the constants that block them."""
    batch: tuple[str, ...] = ()
    """Batch dims: leading dims of the operands, one index per grid step."""
    stages: str | int = 2
    """The constant holding the pipeline's stage count, or a fixed count."""
    cluster: str | None = None
    """The constant that chooses clusters for the warp-specialized matmul (`cluster`); None
    where the kernel declares none, and the plan chooses."""
    const_dims: tuple[str, ...] = ()
    """Result dims that no operand has, sized by the int constant of their name (top-k's K)."""
    param_dims: tuple[str, ...] = ()
    """The dims of parameter vectors, 1-D operands along a dim of their own, read by index."""
    groups: tuple[tuple[str, str], ...] = ()
    """Group dims and the loop dim whose steps each numbers (`{"G": "K"}`: step k of the
    loop over K reads index k of G)."""
    index: tuple[tuple[str, str], ...] = ()
    """Indexed dims and the integer operand whose values address each (`{"V": "ids"}`)."""
    update: str | None = None
    """The operand the result updates in place (`update="cache"`); None for a new array."""
    test_data: tuple[tuple[str, Callable[..., Any]], ...] = ()
    """The kernel's generators of test data, by operand (`test_data=`), in the operands'
    order."""
    joined: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The result dims declared as sums of operand dims ("N1+N2"), each with its parts: the
    kernel's columns, joined from the columns of the operands along each part."""
    approx_math: bool = False
    """Whether the kernel asks for approximate transcendentals (`plan.numerics.ApproxMath`
    decides whether its body gets them)."""
    ragged: tuple[tuple[str, str], ...] = ()
    """The dim split into groups and the operand of the groups' sizes (`{"M":
    "group_sizes"}`): rows of M in group g read their block of g of the operands with the
    sizes' dim."""

    @property
    def group_map(self) -> dict[str, str]:
        return dict(self.groups)

    @property
    def ragged_groups(self) -> dict[str, str]:
        """Each group dim of ragged rows (the sizes operand's dim, "G") and the dim whose rows
        its groups split ("M")."""
        sizes = {o.name: o for o in self.operands}
        return {sizes[name].dims[0]: split for split, name in self.ragged}

    @property
    def group_sizes(self) -> tuple[str, ...]:
        """The operands of ragged groups' sizes: read by the launch's walk, never by the body."""
        return tuple(name for _, name in self.ragged)

    def operand_loop(self, op: OperandSpec) -> str | None:
        """The loop dim whose steps read `op`'s blocks: one of its dims, or the loop its group
        dim numbers; None when no loop does."""
        loops = self.loop_map
        groups = self.group_map
        return next((d for d in op.block_dims if d in loops), None) or next(
            (groups[d] for d in op.groups if d in groups), None
        )

    @property
    def copies_by_data(self) -> bool:
        """Whether some copy's address comes from data: rows an index picks (`index=`),
        pages a table lists (`pages=`), an operand updated in place (`update=`). Those copies
        are made by the launch of one block a CTA (its loops pipelined), not by the row form,
        a persistent walk of blocks or a warp-specialized producer."""
        return bool(self.index or self.update)

    @property
    def page_tables(self) -> dict[str, str]:
        """The page tables by the page dim each lists the pages of (`pages={"P":
        "block_tables"}`, held as the group dim P of its loop, `groups={"P": "S"}`, addressed
        by the table, `index={"P": "block_tables"}`): read by the copies of the pages, never
        by the body."""
        groups = self.group_map
        return {d: name for d, name in self.index if d in groups}

    @property
    def paged_loops(self) -> dict[str, str]:
        """Each loop dim walked page by page, and the dim of its table that counts the pages
        (`{"S": "Pages"}` for `k_pages: "Hkv P S D"` listed by `block_tables: "B Pages"`)."""
        tables = {o.name: o for o in self.operands}
        groups = self.group_map
        return {groups[p]: tables[table].dims[-1] for p, table in self.page_tables.items()}

    def page_table(self, op: OperandSpec) -> str | None:
        """The table listing `op`'s pages, for a paged operand; else None."""
        return self.page_tables.get(op.groups[0]) if op.groups else None

    @property
    def tile_map(self) -> dict[str, str]:
        return dict(self.tile)

    @property
    def loop_map(self) -> dict[str, str]:
        return dict(self.loop)

    @property
    def block_map(self) -> dict[str, str]:
        """Every dim split into blocks, across the grid or along a loop, and its constant."""
        return {**dict(self.tile), **dict(self.loop)}

    def stage_count(self, consts: Mapping[str, Any]) -> int | None:
        """The declared stage count; None when an optional stage constant is None, which
        lets the plan fit as many stages as shared memory holds."""
        if not isinstance(self.stages, str):
            return self.stages
        value = consts[self.stages]
        return None if value is None else int(value)

    def declared_cluster(self, consts: Mapping[str, Any]) -> bool | None:
        """Whether the kernel asks for clusters (True), refuses them (False), or lets the
        plan choose (None, or no `cluster` constant)."""
        if self.cluster is None:
            return None
        value = consts[self.cluster]
        return None if value is None else bool(value)

    @property
    def const_defaults(self) -> dict[str, Any]:
        return {c.name: c.default for c in self.consts}

    @property
    def tunables(self) -> dict[str, tuple[Any, ...]]:
        """The constants declared with `sk.tune(...)`, each with its candidates."""
        return {c.name: c.candidates for c in self.consts if c.candidates}

    def dim_names(self) -> tuple[str, ...]:
        """The operands' dims, whose sizes a call binds."""
        seen: dict[str, None] = {}
        for operand in self.operands:
            for dim in operand.dims:
                seen[dim] = None
        return tuple(seen)

    def layout_dims(self) -> tuple[str, ...]:
        """Every dim a block is laid out along: the operands', then those a constant sizes,
        then the sums of operand dims (a result's joined columns)."""
        return self.dim_names() + self.const_dims + tuple(name for name, _ in self.joined)

    def joined_sizes(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """The size of each joined dim, its parts' sizes together."""
        return {name: sum(sizes[p] for p in parts) for name, parts in self.joined}

    def joined_parts(self) -> tuple[str, ...]:
        """The dims whose operands a joined dim's columns are made of, each held whole."""
        return tuple(dict.fromkeys(p for _, parts in self.joined for p in parts))

    def parameter_operands(self) -> dict[str, tuple[str, ...]]:
        """The operands of parameters, by name, with their block dims: a vector (`"3"`, read
        by index) or a stack of vectors (`"4 C"`, copied with the block)."""
        return {
            o.name: o.block_dims for o in self.operands if set(o.block_dims) & set(self.param_dims)
        }

    def fixed_sizes(self) -> dict[str, int]:
        """The operand dims the annotations name by their size (a vector of parameters,
        `"3"`): that size at the declaration, in every probe and at every call."""
        return {d: int(d) for d in self.dim_names() if d.isdigit()}

    def known_sizes(self, consts: Mapping[str, Any]) -> dict[str, int]:
        """The sizes the declaration fixes, before any operand is bound: the dims named by
        their size, and the result dims a constant sizes, at `consts`."""
        return {**self.fixed_sizes(), **{d: int(consts[d]) for d in self.const_dims}}


def build_spec(declaration: Declaration) -> KernelSpec:
    fn, tile, batch = declaration.fn, declaration.tile, declaration.batch
    kname = declaration.kernel_name
    _check_decorated(declaration)
    where = source_location(fn)
    err: dict[str, Any] = dict(kernel=kname, where=where)
    _check_approx_math(declaration.approx_math, err)
    _check_tile_map(tile, err)
    hints = _type_hints(fn, err)
    # Dims the body never sees: they do not count in an operand's rank.
    groups = declaration.groups
    unseen = check_pages_map(declaration.pages, err) | frozenset(
        groups if isinstance(groups, Mapping) else ()
    )
    positional = tuple(
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    )
    blocked = frozenset[str]((*tile, *(declaration.loop or {}), *batch))
    unseen |= frozenset(ragged_group_dims(declaration.ragged, hints, positional, blocked, err))
    operands, consts = _parameter_specs(fn, hints, err, batch, unseen)
    results, result_is_tuple = _result_specs(hints.get("return"), err, batch)
    blocking = Blocking(dict(tile), dict(declaration.loop or {}), batch)
    groups, index = apply_pages(declaration, operands, results, blocking.loop, err)
    # A group dim an index operand addresses is paged: each step reads the page it names.
    paged = frozenset(groups or ()) & frozenset(index or ()) if index else frozenset()
    operands = apply_groups(groups or {}, operands, results, blocking, err, paged)
    # A mapping of names: apply_groups checked it.
    blocking = dataclasses.replace(blocking, groups=dict(groups or {}))
    updated = check_update(declaration, operands, results, result_is_tuple, err)
    operands, results = apply_index(index or {}, operands, results, blocking, updated, err)
    index = dict(index or {})  # a mapping of names: apply_index checked it
    unblocked = frozenset((*blocking.loop, *batch, *blocking.groups, *index))
    operands, ragged = apply_ragged(declaration.ragged, operands, results, tile, unblocked, err)
    check_packed_operands(operands, err)
    dim_names = list(dict.fromkeys(d for o in operands for d in o.dims))
    check_names(kname, [o.name for o in operands], [r.name for r in results], dim_names, err)
    check_batch(batch, operands, results, err)
    constant_dims = const_dims(operands, results, {c.name: c.is_int for c in consts})
    joined = joined_dims(results)
    check_derivable(operands, results, err, constant_dims + tuple(n for n, _ in joined))
    # A page table is read by the copies of the pages, never by the body.
    # So are the sizes of ragged groups, by the walk of the blocks.
    page_tables = {index[d] for d in paged} | {name for _, name in ragged}
    seen = [o for o in operands if o.name not in page_tables]
    frame = frame_beside_parts(seen, results, joined, constant_dims, blocking, err)
    check_joined(joined, operands, results, frame, blocking, err)
    check_stacked_params(operands, frame, err, blocking.loop)
    check_ragged_rows(ragged, frame.rows, err)
    check_const_dims(results, constant_dims, frame.rows, err)
    _check_batch_unblocked(blocking, err)
    _check_tiling(tile, operands, consts, err)
    if blocking.loop:
        _check_loops(blocking, operands, consts, frame.rows, err)
    stage_spec = stage_spec_of(declaration.stages, consts, err)
    cluster = cluster_spec_of(consts, err)
    generators = check_test_data(declaration.test_data, operands, err)
    return KernelSpec(
        name=kname,
        fn=fn,
        location=where,
        operands=tuple(operands),
        results=tuple(results),
        result_is_tuple=result_is_tuple,
        consts=tuple(consts),
        tile=tuple(tile.items()),
        rows=frame.rows,
        cols=frame.cols,
        reference=declaration.reference,
        loop=tuple(blocking.loop.items()),
        stages=stage_spec,
        batch=batch,
        const_dims=constant_dims,
        param_dims=frame.parameters,
        joined=joined,
        groups=tuple(blocking.groups.items()),
        index=tuple(index.items()),
        update=updated,
        ragged=ragged,
        test_data=generators,
        cluster=cluster,
        approx_math=declaration.approx_math,
    )


def _check_decorated(declaration: Declaration) -> None:
    """The decorator is applied to a plain function, whose signature and annotations it reads."""
    fn = declaration.fn
    if not inspect.isfunction(fn):
        raise AnnotationError(
            "sk.kernel decorates a function, and was applied to something else",
            kernel=declaration.name,
            where=call_site(),
            expected="a function defined with `def`, its operands annotated with jaxtyping "
            "array types",
            actual=f"{type(fn).__name__}: {fn!r}"[:120],
            fix='write @sk.kernel(...) on the line above `def my_kernel(x: Float[Array, "M N"], '
            "...)`; apply it to the plain function, not to a jitted or wrapped one",
        )


def _check_approx_math(approx_math: object, err: dict[str, Any]) -> None:
    if not isinstance(approx_math, bool):
        raise AnnotationError(
            "approx_math= is not a bool",
            **err,
            expected="True (approximate exp, exp2, log, log2 and rsqrt) or False (exact)",
            actual=repr(approx_math),
            fix="pass approx_math=True or leave it out",
        )


def _check_tile_map(tile: Mapping[str, str], err: dict[str, Any]) -> None:
    if not isinstance(tile, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tile.items()
    ):
        raise TilingError(
            "tile= must map dim names to constant names",
            **err,
            expected='a dict such as {"M": "BM"}, with BM a keyword-only sk.Const[int] parameter',
            actual=repr(tile),
            fix='write tile={"M": "BM"} and declare `BM: sk.Const[int] = 64`',
        )


def _type_hints(fn: Callable[..., Any], err: dict[str, Any]) -> dict[str, Any]:
    """The function's annotations, resolved, with `Annotated` kept: `sk.Const` is one."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # unresolvable forward references and the like
        raise AnnotationError(
            f"its annotations cannot be resolved: {exc}",
            **err,
            fix="define every name used in the annotations before the kernel, and do not use "
            "`from __future__ import annotations` in kernel modules",
        ) from None


def _parameter_specs(
    fn: Callable[..., Any],
    hints: dict[str, Any],
    err: dict[str, Any],
    batch: tuple[str, ...],
    groups: frozenset[str],
) -> tuple[list[OperandSpec], list[ConstSpec]]:
    """The operands, the positional parameters, and the constants, the keyword-only ones."""
    operands: list[OperandSpec] = []
    consts: list[ConstSpec] = []
    for param in inspect.signature(fn).parameters.values():
        _check_parameter(param, err)
        if param.kind == param.KEYWORD_ONLY:
            consts.append(const_spec(param, hints.get(param.name), err))
        else:
            if param.default is not param.empty:
                raise AnnotationError(
                    f"operand `{param.name}` has a default value",
                    **err,
                    operand=param.name,
                    fix=f"make `{param.name}` keyword-only after `*` and annotate it "
                    "`sk.Const[int]` if it is a constant",
                )
            operands.append(
                array_spec(
                    param.name,
                    hints.get(param.name),
                    err,
                    role="operand",
                    batch=batch,
                    groups=groups,
                    signature=hints,
                )
            )
    if not operands:
        raise AnnotationError(
            "it declares no operands",
            **err,
            fix='add at least one operand, e.g. `x: Float[Array, "M N"]`',
        )
    return operands, consts


def _check_parameter(param: inspect.Parameter, err: dict[str, Any]) -> None:
    """A parameter that can be neither an operand nor a constant."""
    if param.name in RESERVED_NAMES:
        raise AnnotationError(
            f"parameter `{param.name}` uses a name statickernel reserves for the call",
            **err,
            operand=param.name,
            fix=f"rename `{param.name}`",
        )
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        raise AnnotationError(
            f"`*{param.name}` or `**{param.name}` parameters cannot be operands or constants",
            **err,
            operand=param.name,
            fix="list every operand as a named parameter and every constant as a keyword-only "
            "parameter after `*`",
        )


def _check_batch_unblocked(blocking: Blocking, err: dict[str, Any]) -> None:
    """A batch dim is walked one index a grid step, so it is neither tiled nor looped over."""
    batch, tile, loop = blocking.batch, blocking.tile, blocking.loop
    for dim in batch:
        if dim in tile or dim in loop:
            raise TilingError(
                f"batch dim {dim} is also in {'tile=' if dim in tile else 'loop='}",
                **err,
                dim=dim,
                expected="a batch dim in batch= only: each grid step takes one index of it",
                actual=f"batch={batch!r}",
                fix=f"drop {dim} from {'tile=' if dim in tile else 'loop='}",
            )


def _result_specs(
    hint: Any, err: dict[str, Any], batch: tuple[str, ...] = ()
) -> tuple[list[OperandSpec], bool]:
    if hint is None:
        raise AnnotationError(
            "it has no result annotation",
            **err,
            fix='annotate the result, e.g. `-> Float[Array, "M N"]`',
        )
    if typing.get_origin(hint) is tuple:
        parts = typing.get_args(hint)
        if not parts or Ellipsis in parts:
            raise AnnotationError(
                "its tuple result annotation must list each result",
                **err,
                actual=type_name(hint),
                fix='write e.g. `-> tuple[Float[Array, "M N"], Float[Array, "M"]]`',
            )
        return [
            array_spec(result_name(i, True), p, err, role="result", batch=batch)
            for i, p in enumerate(parts)
        ], True
    return [array_spec(result_name(0, False), hint, err, role="result", batch=batch)], False


def _check_loops(
    blocking: Blocking,
    operands: list[OperandSpec],
    consts: list[ConstSpec],
    rows: str,
    err: dict[str, Any],
) -> None:
    loop, tile = blocking.loop, blocking.tile
    operand_dims = {d for o in operands for d in o.dims}
    const_by_name = {c.name: c for c in consts}
    if not isinstance(loop, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in loop.items()
    ):
        raise TilingError(
            "loop= must map dim names to constant names",
            **err,
            expected='a dict such as {"K": "BK"}, with BK a keyword-only sk.Const[int] parameter',
            actual=repr(loop),
            fix='write loop={"K": "BK"} and declare `BK: sk.Const[int] = 64`',
        )
    for dim, const_name in loop.items():
        if dim not in operand_dims:
            raise TilingError(
                f"loop= names dim {dim}, which no operand declares",
                **err,
                dim=dim,
                expected=f"one of {', '.join(sorted(operand_dims))}",
                actual=repr(dim),
                fix="loop over a declared dim",
            )
        if dim in tile:
            raise TilingError(
                f"dim {dim} is both tiled across the grid and looped over",
                **err,
                dim=dim,
                expected="each dim in at most one of tile= and loop=",
                actual=f"tile[{dim!r}]={tile[dim]!r}, loop[{dim!r}]={const_name!r}",
                fix=f"drop {dim} from tile= to walk it in a loop, or from loop= to spread it over "
                "the grid",
            )
        const = const_by_name.get(const_name)
        if const is None or not const.is_int:
            raise TilingError(
                f"dim {dim} is looped over in blocks of {const_name!r}, which is not an int "
                "constant of the kernel",
                **err,
                dim=dim,
                expected=f"one of {', '.join(c.name for c in consts if c.is_int) or '(none)'}",
                actual=repr(const_name),
                fix=f"add a keyword-only parameter `{const_name}: sk.Const[int] = 64`",
            )
    if rows not in tile and rows not in loop:
        raise TilingError(
            f"the row dim {rows} of a kernel with loop dims is neither tiled nor looped over",
            **err,
            dim=rows,
            expected=f"{rows} in tile= or in loop=",
            actual=f"tile={dict(tile)!r}, loop={dict(loop)!r}",
            fix=f'tile it, e.g. tile={{"{rows}": "B{rows}", ...}} with `B{rows}: sk.Const[int] = 64`, '
            f'or walk it: loop={{"{rows}": "B{rows}"}}',
        )


def _check_tiling(
    tile: Mapping[str, str],
    operands: list[OperandSpec],
    consts: list[ConstSpec],
    err: dict[str, Any],
) -> None:
    operand_dims = {d for o in operands for d in o.dims}
    const_by_name = {c.name: c for c in consts}
    for dim, const_name in tile.items():
        if dim not in operand_dims:
            raise TilingError(
                f"the tiling names dim {dim}, which no operand declares",
                **err,
                dim=dim,
                expected=f"one of {', '.join(sorted(operand_dims))}",
                actual=repr(dim),
                fix=f"tile a declared dim, e.g. tile={{{sorted(operand_dims)[0]!r}: 'B'}}",
            )
        if not isinstance(const_name, str) or const_name not in const_by_name:
            raise TilingError(
                f"dim {dim} is tiled by {const_name!r}, which is not a constant of the kernel",
                **err,
                dim=dim,
                expected=f"one of {', '.join(const_by_name) or '(no constants declared)'}",
                actual=repr(const_name),
                fix=f"add a keyword-only parameter `{const_name}: sk.Const[int] = 64`",
            )
        if not const_by_name[const_name].is_int:
            raise TilingError(
                f"dim {dim} is tiled by constant `{const_name}`, which is not an int",
                **err,
                dim=dim,
                expected="sk.Const[int]",
                actual=f"sk.Const[{const_by_name[const_name].type.__name__}]",
                fix=f"annotate `{const_name}: sk.Const[int]`",
            )

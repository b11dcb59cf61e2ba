"""Each register form and launch schedule is a unit: the plan holds what a variant fixes in
one slot (`LaunchPlan.planned_form`, `LaunchPlan.schedule_variant`), and only the variant's own
modules read its config.

A schedule's unit is the modules of the back-end's `schedules/`, `plan/` and `emit/` packages
named after it (`split.py` in each; `warpspec_padding.py` is `warpspec`'s too). Outside its
unit, a module neither imports its config type nor reads the plan's property of that name
(`plan.split`, `plan.consumer_pair`, `plan.warp_specialized`), except the plan itself, which
holds the slot (`plan/plan.py`, `plan/make.py`, `plan/variants.py`), and the readers `NOT_YET_MOVED` lists:
that list may only shrink. (A form's frames are pinned by
`tests/compiler/mosaic_gpu/forms/test_form_strategies.py`.) The plan package does not import
the schedules, but for `make_plan`, which still chooses the schedule itself.
"""

import ast
import dataclasses
import pathlib

import statickernel as sk

PACKAGE = pathlib.Path(sk.__file__).parent
BACKEND = PACKAGE / "_compiler" / "mosaic_gpu"
UNIT_PACKAGES = ("schedules", "plan", "emit")


@dataclasses.dataclass(frozen=True)
class Variant:
    """A launch schedule with a config of its own: its unit's name, its config's class, and
    the plan's property that reads the config."""

    unit: str
    config: str
    prop: str


VARIANTS = (
    Variant("split", "LoopSplit", "split"),
    Variant("consumers", "ConsumerPair", "consumer_pair"),
    Variant("warpspec", "WarpSpecialized", "warp_specialized"),
    Variant("mma_warp", "MmaWarpSpecialized", "warp_specialized"),
)

# The modules that hold the slots: the plan's compatibility properties and its text, and
# make_plan, which fills them.
SLOT_MODULES = {
    "_compiler/mosaic_gpu/plan/plan.py",
    "_compiler/mosaic_gpu/plan/make.py",
    "_compiler/mosaic_gpu/plan/variants.py",
}

# Readers of a variant's config outside its unit, not yet moved to ask the unit: (module,
# what it reads). Remove an entry once its reader is moved; never add one.
NOT_YET_MOVED = {
    # The public API re-exports the split's config (`sk.LoopSplit`): naming the type for the
    # users who read a plan's schedule slot, not reading a plan's config.
    ("_api.py", "LoopSplit"),
}

# Modules of the plan package that import the schedules: `make_plan` asks them for the launch.
PLAN_IMPORTS_SCHEDULES = {"make.py"}


def _modules() -> dict[str, ast.Module]:
    return {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _in_unit(module: str, unit: str) -> bool:
    path = pathlib.PurePosixPath(module)
    in_package = any(
        path.parent == pathlib.PurePosixPath("_compiler/mosaic_gpu", p) for p in UNIT_PACKAGES
    )
    return in_package and (path.stem == unit or path.stem.startswith(f"{unit}_"))


def _reads(tree: ast.Module, variant: Variant) -> set[str]:
    """What `tree` reads of `variant`: its config's class imported, the plan's property."""
    reads = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == variant.config for a in node.names):
            reads.add(variant.config)
        if isinstance(node, ast.Attribute) and node.attr == variant.prop:
            receiver = node.value
            plan = (isinstance(receiver, ast.Name) and receiver.id == "plan") or (
                isinstance(receiver, ast.Attribute) and receiver.attr == "plan"
            )
            if plan or variant.prop != "split":  # `.split` is also str's and a ragged dim's
                reads.add(variant.prop)
    return reads


def test_only_a_variants_unit_reads_its_config() -> None:
    found = set()
    for module, tree in _modules().items():
        if module in SLOT_MODULES:
            continue
        for variant in VARIANTS:
            if _in_unit(module, variant.unit):
                continue
            shared = {v.unit for v in VARIANTS if v.prop == variant.prop}
            for read in _reads(tree, variant):
                if read == variant.prop and any(_in_unit(module, u) for u in shared):
                    continue  # the units that share a property read it for their own
                found.add((module, read))
    assert found <= NOT_YET_MOVED, (
        f"a variant's config read outside its unit: {sorted(found - NOT_YET_MOVED)}; ask the "
        "variant's emitter (emit/launches.py) or add what it needs to its unit"
    )
    assert found >= NOT_YET_MOVED, (
        f"moved, drop from NOT_YET_MOVED: {sorted(NOT_YET_MOVED - found)}"
    )


def _imports_schedules(node: ast.AST) -> bool:
    """Whether `node` imports the back-end's schedules (from a module of `plan/`)."""
    if isinstance(node, ast.Import):
        return any("mosaic_gpu.schedules" in alias.name for alias in node.names)
    if not isinstance(node, ast.ImportFrom):
        return False
    module = node.module or ""
    if node.level == 2:  # from ..schedules..., or from .. import schedules
        names = {alias.name for alias in node.names}
        return module.split(".")[0] == "schedules" or (not module and "schedules" in names)
    return "mosaic_gpu.schedules" in module


def test_the_plan_package_does_not_import_the_schedules() -> None:
    importers = {
        path.name
        for path in sorted((BACKEND / "plan").glob("*.py"))
        if any(_imports_schedules(node) for node in ast.walk(ast.parse(path.read_text())))
    }
    assert importers <= PLAN_IMPORTS_SCHEDULES, (
        f"the plan package imports the schedules: {sorted(importers - PLAN_IMPORTS_SCHEDULES)}"
    )
    assert importers >= PLAN_IMPORTS_SCHEDULES, (
        f"no longer imports the schedules, drop: {sorted(PLAN_IMPORTS_SCHEDULES - importers)}"
    )


def test_the_plan_holds_one_slot_a_kind_of_variant() -> None:
    fields = {f.name for f in dataclasses.fields(sk.LaunchPlan)}
    assert {"planned_form", "schedule_variant"} <= fields
    assert not fields & {"row_frame", "flat_frame", "split", "consumer_pair", "warp_specialized"}
    # Each slot shown under the names of the configs it holds, in `plan --json`'s order.
    keys = sk.LaunchPlan.json_keys()
    assert len(keys) == len(set(keys)) and "planned_form" not in keys
    assert fields - {"planned_form", "schedule_variant"} <= set(keys)

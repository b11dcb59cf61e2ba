"""What the installed jax supports, for the tests whose subject needs more than statickernel
does on every supported jax (declare, bind, plan, emit): the one place a test asks, so that
each skip says the same thing for the same reason.

On Python 3.11 pip installs jax 0.10.2 (jax 0.11 needs Python 3.12): there kernels are
declared, planned and emitted, but their generated Pallas Mosaic GPU modules cannot run or be
lowered (`statickernel._compat.runs_mosaic_gpu`), and no golden modules are kept for it.
"""

import pathlib

import jax
import pytest

from statickernel import _compat

REPO = pathlib.Path(__file__).resolve().parent.parent
GOLDEN_ROOT = REPO / "tests" / "compiler" / "mosaic_gpu" / "emit" / "golden"
# This jax's golden modules: `kernel.emit` of every gallery kernel, pinned per jax release
# because the generated store differs between jax 0.11 and 0.12.
GOLDEN_DIR = GOLDEN_ROOT / f"jax-{jax.__version__}"

_OLDEST = ".".join(map(str, _compat.MOSAIC_GPU_MIN_JAX))

RUNS_MOSAIC_GPU = _compat.runs_mosaic_gpu()


def needs_mosaic_gpu_jax(subject: str) -> pytest.MarkDecorator:
    """Skips a test whose subject (`subject`, said in the reason) exists only on a jax that runs
    the generated Pallas Mosaic GPU modules: on an older jax it is skipped, not failed."""
    return pytest.mark.skipif(
        not RUNS_MOSAIC_GPU,
        reason=f"{subject}: needs jax>={_OLDEST}; this is jax {jax.__version__}, where "
        "kernels are declared, planned and emitted but not run",
    )


# For a test that runs, compiles or lowers a generated module without a kernel call (a call
# itself raises the BackendError that says so, which is what a test of the call should see).
needs_mosaic_gpu = needs_mosaic_gpu_jax("runs a generated Pallas Mosaic GPU module")


def golden_versions() -> list[str]:
    """The jax releases that have golden modules, oldest first."""
    return sorted(
        (p.name.removeprefix("jax-") for p in GOLDEN_ROOT.glob("jax-*") if p.is_dir()),
        key=lambda v: tuple(int(part) for part in v.split(".")),
    )


def require_golden_dir() -> pathlib.Path:
    """This jax's golden folder; skips the calling test, saying why, when there is none."""
    if not GOLDEN_DIR.is_dir():
        pytest.skip(
            f"no golden modules for jax {jax.__version__}: they are kept for jax "
            f"{', '.join(golden_versions())} only ({GOLDEN_ROOT.relative_to(REPO)}/jax-*/), "
            "so the emitted source is not compared on this jax"
            + (
                "; to support it, create them with STATICKERNEL_UPDATE_GOLDEN=1"
                if RUNS_MOSAIC_GPU
                else ""
            )
        )
    return GOLDEN_DIR

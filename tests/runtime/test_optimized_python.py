"""statickernel under `python -O`, which drops every `assert`: no choice of form or schedule
may depend on one, so the same kernels take the same forms and lower the same way."""

import os
import pathlib
import subprocess
import sys

import pytest

# Two minutes of subprocesses; assertions are not jax-version dependent, so one run is enough.
pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]

# A bf16 add whose whole N (8 columns) leaves a block of 64 x 8 = 512 elements: too few for
# the strided layout's 128 threads x 8, so the block form must take it.
NARROW_ADD = """
import jax.numpy as jnp
from jaxtyping import Array, Float
import statickernel as sk

assert False, "python -O keeps asserts"

@sk.kernel(tile={"M": "BM"})
def add(x: Float[Array, "M N"], y: Float[Array, "M N"], *, BM: sk.Const[int] = 64
        ) -> Float[Array, "M N"]:
    return sk.load(x) + sk.load(y)

x = jnp.arange(128 * 8, dtype=jnp.float32).reshape(128, 8).astype(jnp.bfloat16)
add.lower(x, x)
got = add(x, x)
if not bool((got == x + x).all()):
    raise SystemExit("wrong result")
print("ok")
"""

# One kernel of each form and schedule: strided block (add), block (softmax, layernorm), rows
# (layernorm_wide), pipelined loops (attention), warp-specialized persistent (matmul).
GALLERY_SAMPLE = ["add.py", "softmax.py", "layernorm_wide.py", "attention.py", "matmul.py"]


def _run_optimized(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-O", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=600,
    )


def test_a_narrow_block_takes_the_block_form_without_asserts() -> None:
    done = _run_optimized("-c", NARROW_ADD)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_the_gallery_sample_lowers_and_matches_its_references_without_asserts() -> None:
    files = [f"examples/{name}" for name in GALLERY_SAMPLE]
    checked = _run_optimized("-m", "statickernel", "check", *files, "--lower")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    tested = _run_optimized("-m", "statickernel", "test", "examples/add.py", "examples/softmax.py")
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert ", 0 ✗ (" in tested.stdout

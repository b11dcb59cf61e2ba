"""JAX's persistent compilation cache applies to statickernel's launches: a second process over
the same cache folder finds every compile there and writes no new entry."""

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

PROGRAM = """
import sys

import jax
import jax.numpy as jnp

jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
sys.path.insert(0, "examples")
from softmax import softmax

x = jnp.arange(100 * 64, dtype=jnp.float32).reshape(100, 64) / 1000
print(float(softmax.with_backend("interpret")(x).sum()))
"""


def _run(cache: pathlib.Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(cache)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_second_process_compiles_nothing_new(tmp_path: pathlib.Path) -> None:
    cache = tmp_path / "jax-cache"
    first = _run(cache)
    entries = sorted(p.name for p in cache.iterdir())
    assert entries, "the first process cached no compile"
    assert _run(cache) == first
    assert sorted(p.name for p in cache.iterdir()) == entries

"""Kernels on the interpreter over several host devices, each scenario in a process of its own:
the device count is read when jax initializes, and a process that XLA aborts (a collective
whose other devices never arrive) must not take the test run with it.

Each script checks its numbers against jnp, prints them as one JSON line, and makes later
calls to show that the process is still usable; the test also asserts a clean exit."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import statickernel as sk

EXAMPLES_DIR = pathlib.Path(__file__).resolve().parents[2] / "examples"
PACKAGE_DIR = pathlib.Path(sk.__file__).resolve().parent.parent
# Generous for a loaded 2-CPU machine; a hang at a collective ends the process after a minute.
TIMEOUT_S = 300

_PRELUDE = """
import json
import sys

sys.path[:0] = sys.argv[1:3]
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import statickernel as sk
from softmax import softmax

results = {}


def close(name, got, want):
    results[name] = bool(np.allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6))
"""


def run_on_devices(script: str, devices: int) -> tuple[dict[str, Any], str]:
    """Runs `script` (after the prelude) in a fresh process with `devices` host devices: the
    JSON it printed last, and its stderr. Fails unless the process exits with 0."""
    env = {k: v for k, v in os.environ.items() if k != "STATICKERNEL_BACKEND"}
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    source = _PRELUDE + textwrap.dedent(script)
    proc = subprocess.run(
        [sys.executable, "-c", source, str(EXAMPLES_DIR), str(PACKAGE_DIR)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"exit status {proc.returncode}:\n{proc.stderr[-4000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output:\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1]), proc.stderr


def test_calls_under_a_mesh_set_for_shard_map() -> None:
    # jax.set_mesh, which shard_map without mesh= and explicit sharding need, stays set for
    # every later call: a launch's result, on one device, was a sharding jax could not name on
    # the mesh, and every later call on an array on one device failed to compile.
    results, _ = run_on_devices(
        """
        mesh = jax.make_mesh((4,), ("d",))
        x = jax.random.normal(jax.random.key(0), (256, 100))  # on one device
        jax.set_mesh(mesh)
        rows = jax.device_put(x, NamedSharding(mesh, P("d")))
        mapped = jax.shard_map(softmax, in_specs=P("d"), out_specs=P("d"))
        close("shard_map", mapped(rows), jax.nn.softmax(x))
        close("jit shard_map", jax.jit(mapped)(rows), jax.nn.softmax(x))
        close("eager", softmax(x), jax.nn.softmax(x))
        close("jit", jax.jit(softmax)(x), jax.nn.softmax(x))
        loss = lambda f: lambda v: jnp.sum(f(v) ** 2)
        close("grad", jax.grad(loss(softmax))(x), jax.grad(loss(jax.nn.softmax))(x))
        close("shard_map again", mapped(rows), jax.nn.softmax(x))
        print(json.dumps(results))
        """,
        devices=4,
    )
    assert results == dict.fromkeys(
        ["shard_map", "jit shard_map", "eager", "jit", "grad", "shard_map again"], True
    )


def test_gradients_under_shard_map() -> None:
    # A launch's results were typed as varying along no mesh axis, so a declared backward's
    # cotangents did not match their operands' type, and jax.grad refused the custom_vjp.
    results, _ = run_on_devices(
        """
        from softmax import softmax_by_reference

        mesh = jax.make_mesh((4,), ("d",))
        x = jax.random.normal(jax.random.key(0), (256, 100))
        rows = jax.device_put(x, NamedSharding(mesh, P("d")))
        loss = lambda f: lambda v: jnp.sum(f(v) ** 2)
        want = jax.grad(loss(jax.nn.softmax))(x)
        for name, kernel in [("declared", softmax), ("by reference", softmax_by_reference)]:
            grad = jax.shard_map(
                jax.grad(loss(kernel)), mesh=mesh, in_specs=P("d"), out_specs=P("d")
            )
            close(name, grad(rows), want)
            close(f"{name} jitted", jax.jit(grad)(rows), want)
        close("eager after", softmax(x), jax.nn.softmax(x))
        print(json.dumps(results))
        """,
        devices=4,
    )
    assert results == dict.fromkeys(
        ["declared", "declared jitted", "by reference", "by reference jitted", "eager after"],
        True,
    )


def test_runs_dispatched_over_two_devices_finish_before_the_process_exits() -> None:
    # Dispatched and never awaited, the launches call back while the process exits. They ran
    # on an executor that refuses work by then (and later into JAX's own exit hook, which
    # clears its backends): a refused launch failed device 0's part of the jit, and device 1,
    # waiting for it in a collective, aborted the process a minute later (exit status 134).
    results, stderr = run_on_devices(
        """
        mesh = jax.make_mesh((2,), ("d",), axis_types=(AxisType.Auto,))
        x = jax.random.normal(jax.random.key(0), (256, 100))
        rows = jax.device_put(x, NamedSharding(mesh, P("d")))
        mapped = jax.jit(jax.shard_map(softmax, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
        close("jit sharded", jax.jit(softmax)(rows), jax.nn.softmax(x))
        close("eager", softmax(x), jax.nn.softmax(x))
        pending = [jax.jit(softmax)(rows), mapped(rows), jax.jit(softmax)(rows + 1)]
        pending.append(jax.pmap(softmax)(x.reshape(2, 128, 100)))
        print(json.dumps(results))
        """,
        devices=2,
    )
    assert results == {"jit sharded": True, "eager": True}
    assert "failed" not in stderr and "rendezvous" not in stderr, stderr[-4000:]


def test_a_masked_body_under_shard_map() -> None:
    # Traced inside the shard_map, the body saw its mesh, and jnp.where put a `reshard` of the
    # tile in it: refused as an op Mosaic GPU cannot lower.
    results, _ = run_on_devices(
        """
        from jaxtyping import Array, Float


        @sk.kernel(tile={"M": "BM"})
        def positive_row_max(
            x: Float[Array, "M N"], *, BM: sk.Const[int] = 64
        ) -> tuple[Float[Array, "M N"], Float[Array, "M"]]:
            v = sk.load(x, fill=-jnp.inf)
            masked = jnp.where(v > 0, v, -jnp.inf)
            return masked, sk.max(masked, axis=1)


        def reference(v):
            masked = jnp.where(v > 0, v, -jnp.inf)
            return masked, jnp.max(masked, axis=1)


        mesh = jax.make_mesh((4,), ("d",))
        x = jax.random.normal(jax.random.key(0), (256, 100))
        rows = jax.device_put(x, NamedSharding(mesh, P("d")))
        mapped = jax.shard_map(
            positive_row_max, mesh=mesh, in_specs=P("d"), out_specs=(P("d"), P("d"))
        )
        for name, out in [
            ("shard_map", mapped(rows)),
            ("jit shard_map", jax.jit(mapped)(rows)),
            ("eager after", positive_row_max(x)),
        ]:
            # Selections and a max: exact whatever the order of the work.
            results[name] = all(
                bool(np.array_equal(np.asarray(o), np.asarray(w)))
                for o, w in zip(out, reference(x), strict=True)
            )
        print(json.dumps(results))
        """,
        devices=4,
    )
    assert results == {"shard_map": True, "jit shard_map": True, "eager after": True}

"""The main job, end to end: check the gallery, show a plan, run every kernel against its reference.

Run from the project root with `make demo` or `python -m statickernel.demo [EXAMPLES_DIR]`.
"""

import importlib.util
import pathlib
import sys
import time
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._backend import default_backend
from ._errors import StaticKernelError
from ._kernel import Kernel

# Each gallery kernel with its operands at a ragged shape: rows and columns that are not
# multiples of the blocks, and one array whose rows TMA cannot address (f32, 130 columns).
_SHAPES: dict[str, list[tuple[tuple[int, ...], str]]] = {
    "add": [((1000, 777), "float32"), ((1000, 777), "float32")],
    "scale_bias": [((300, 1000), "bfloat16"), ((1000,), "bfloat16")],
    "softmax": [((1000, 100), "float32")],
    "rmsnorm": [((517, 200), "bfloat16"), ((200,), "bfloat16")],
    "layernorm": [((1000, 130), "float32"), ((130,), "float32"), ((130,), "float32")],
    "row_sum": [((999, 250), "float32")],
}


def _load_module(path: pathlib.Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"statickernel_demo_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _operands(name: str) -> list[jax.Array]:
    keys = jax.random.split(jax.random.key(0), len(_SHAPES[name]))
    # Values well below zero make a zero fill visibly wrong for max and softmax.
    return [
        (jax.random.normal(k, shape, jnp.float32) * 2 - 4).astype(dtype)
        for k, (shape, dtype) in zip(keys, _SHAPES[name], strict=True)
    ]


def _max_error(got: Any, want: Any) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float32) - np.asarray(want, np.float32))))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    examples = pathlib.Path(args[0] if args else "examples")
    print(f"statickernel demo: jax {jax.__version__}, backend {default_backend()}\n")
    print(f"1. Checking the kernels in {examples}/ (import-time checks)")
    kernels: dict[str, Kernel[..., Any]] = {}
    for path in sorted(examples.glob("*.py")):
        try:
            module = _load_module(path)
        except StaticKernelError as exc:
            print(f"   ✗ {path.name}\n{exc}")
            continue
        for value in vars(module).values():
            if isinstance(value, Kernel) and value.spec.name == path.stem:
                kernels[path.stem] = value
                print(f"   ✓ {path.name}:{value.spec.name}")
    softmax = kernels.get("softmax")
    if softmax is not None:
        print("\n2. The launch plan of softmax at a ragged shape (1000 x 100)")
        print("   " + str(softmax.plan(*_operands("softmax"))).replace("\n", "\n   "))
    print("\n3. Each kernel against its reference, at a ragged shape")
    print(f"   {'kernel':<12} {'operands':<44} {'max abs error':>14}  {'lowers for CUDA':>15}")
    failures = 0
    for name, kern in kernels.items():
        if name not in _SHAPES or kern.reference is None:
            continue
        operands = _operands(name)
        start = time.perf_counter()
        got = kern(*operands)
        elapsed = time.perf_counter() - start
        error = _max_error(got, kern.reference(*operands))
        tolerance = 1e-4 if all(o.dtype == jnp.float32 for o in operands) else 5e-2
        lowered = "mosaic_gpu" in kern.lower(*operands).as_text()
        ok = error <= tolerance * max(1.0, float(np.max(np.abs(np.asarray(got, np.float32)))))
        failures += not (ok and lowered)
        shapes = ", ".join(f"{o.dtype}{list(o.shape)}" for o in operands)
        print(
            f"   {'✓' if ok else '✗'} {name:<10} {shapes:<44} {error:>14.3g}  "
            f"{'yes' if lowered else 'NO':>15}   ({elapsed:.2f} s first call)"
        )
    print("\nThe generated Pallas source of any specialization: kernel.emit(*operands).")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

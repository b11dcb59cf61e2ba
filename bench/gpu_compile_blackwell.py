"""The rows `bench/gpu_compile.py --target sm_100a` compiles: the gallery's products generated
for Blackwell (tcgen05 into tensor memory), beside jax's own `blackwell_matmul_mgpu` at the
same shape, and their table. Run in a process of its own: ptxas keeps the architecture of a
process' first compile."""

import re
from typing import Any

import jax

from gpu_compile_rows import Row, tile

__all__ = [
    "BLACKWELL_ROWS",
    "JAX_BLACKWELL_MATMUL",
    "jax_blackwell_matmul_report",
    "markdown",
    "mma_ctas",
    "tmem_columns",
]

JAX_BLACKWELL_MATMUL = "blackwell_matmul_mgpu"

_ATTENTION = (((1, 16, 4096, 128), "bfloat16"),) * 3
_ATTENTION_64 = (((1, 16, 4096, 64), "bfloat16"),) * 3
_MLP = (((4096, 256), "bfloat16"), ((256, 4096), "bfloat16"), ((4096, 128), "bfloat16"))

BLACKWELL_ROWS: tuple[Row, ...] = (
    Row("matmul", "matmul", tile(4096, 4096, "bfloat16", 2)),
    Row("matmul", "matmul", tile(4096, 4096, "bfloat16", 2), (("bf16_out", True),)),
    # The single-CTA twin of the 2-CTA form the plan takes at this size.
    Row("matmul", "matmul", tile(4096, 4096, "bfloat16", 2), (("cluster", False),)),
    # Every dim ragged: the operands padded on the host to whole tiles, as for WGMMA.
    Row("matmul", "matmul", (((4095, 4097), "bfloat16"), ((4097, 4095), "bfloat16"))),
    Row(
        "matmul_bias_gelu",
        "matmul_bias_gelu",
        (*tile(4096, 4096, "bfloat16", 2), ((4096,), "bfloat16")),
    ),
    Row("batched_matmul", "batched_matmul", (((8, 1024, 1024), "bfloat16"),) * 2),
    Row(
        "matmul_fp8",
        "matmul_fp8",
        (*tile(4096, 4096, "float8_e4m3fn", 2), ((), "float32"), ((), "float32")),
    ),
    Row("mlp", "mlp", _MLP),
    # attention's two products a step: scores and p @ v through tensor memory, BQ 128.
    Row("attention", "attention", _ATTENTION),
    Row("attention", "attention", _ATTENTION_64),
    Row("attention", "attention", _ATTENTION_64, (("causal", True),)),
    # jax's own: 128 x 128 x 128 tiles, 2 stages, one CTA an MMA (no cluster); and its 2-CTA
    # MMAs at the pair tile statickernel's takes (256 x 128: each CTA 64 of b's columns).
    Row("jax", JAX_BLACKWELL_MATMUL, tile(4096, 4096, "bfloat16", 2)),
    Row("jax", JAX_BLACKWELL_MATMUL, tile(4096, 4096, "bfloat16", 2), (("collective", True),)),
)


def jax_blackwell_matmul_report(row: Row, target: str) -> Any:
    """jax's `blackwell_matmul_mgpu`: 128 x 128 x 128 tiles, 2 stages; or with
    `collective=True`, 2-CTA MMAs on pair tiles of 256 x 128 (tile_n 64 a CTA), 4 stages of
    K = 64, 64-column epilogue pieces."""
    from jax.experimental.pallas.ops.gpu import blackwell_matmul_mgpu as bmm

    from statickernel.aot.compile import _compile

    if dict(row.consts).get("collective"):
        config = bmm.TuningConfig(
            tile_m=128, tile_n=64, tile_k=64, max_concurrent_steps=4, collective=True
        )
    else:
        config = bmm.TuningConfig(
            tile_m=128, tile_n=128, tile_k=128, max_concurrent_steps=2, collective=False
        )
    fn = jax.jit(lambda a, b: bmm.matmul_kernel(a, b, config))
    return _compile(fn, row.structs, JAX_BLACKWELL_MATMUL, target, 0, None)


def mma_ctas(sass: str) -> int:
    """The CTAs one tcgen05 MMA spans: 2 where the SASS has 2-CTA MMAs
    (`UTCHMMA.2CTA`, `UTCQMMA.2CTA`), else 1."""
    return 2 if re.search(r"\bUTC[HQ]MMA(\.\w+)*\.2CTA\b", sass) else 1


def tmem_columns(ptx: str) -> int:
    """The tensor memory columns the kernel allocates (`tcgen05.alloc`, its column count an
    immediate or a register moved one), all allocations; 0 when none is found."""
    total = 0
    for count in re.findall(r"tcgen05\.alloc[.\w:]*\s+\[[^\]]*\],\s*([%\w]+)\s*;", ptx):
        if count.isdigit():
            total += int(count)
            continue
        moved = re.search(rf"mov\.[bu]32\s+{re.escape(count)},\s*(\d+)\s*;", ptx)
        total += int(moved.group(1)) if moved else 0
    return total


def markdown(rows: list[dict[str, Any]]) -> str:
    head = [
        "| kernel | operands | registers | spills (B) | SMEM (B) | TMEM columns | threads "
        "| CTAs/SM | CTAs an MMA | UTCHMMA/UTCQMMA | LDTM/STTM | TMA loads | TMA stores | STSM |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines = []
    for r in rows:
        shape = ", ".join(r["shape"])
        if r["status"] in ("not emitted", "compile error"):
            lines.append(f"| {r['kernel']} | {shape} | {r['status']}: {r['reason']} |" + " |" * 11)
            continue
        s = r["sass"]
        lines.append(
            f"| {r['kernel']} | {shape} | {r['registers']} | {r['spill_bytes']} | "
            f"{r['smem_bytes']:,} | {r.get('tmem_columns', '-')} | {r['threads']} | "
            f"{r['ctas_per_sm']} | {r.get('mma_ctas', 1)} | {s['UTCHMMA'] + s['UTCQMMA']} | {s['LDTM']}/{s['STTM']} | "
            f"{s['UTMALDG']} | {s['UTMASTG']} | {s['STSM']} |"
        )
    return "\n".join(head + lines) + "\n"

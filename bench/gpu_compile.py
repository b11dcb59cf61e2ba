"""Compiles every gallery kernel for the GPU at the sizes the GPU check measures, with no GPU.

    JAX_PLATFORMS=cpu .venv-aot/bin/python bench/gpu_compile.py   # what `make gpu-compile` runs

Each row is one kernel at one shape, compiled through ptxas for sm_90a (H100/H200): its
registers, spills, shared memory, CTAs per SM and SASS mix, written to
bench/results/gpu-compile.json and as a Markdown table to bench/results/gpu-compile.md.
`--target sm_100a` compiles the products generated for Blackwell (bench/gpu_compile_blackwell.py)
into bench/results/gpu-compile-sm_100a.{json,md}, in a process of its own.
A kernel that statickernel refuses at a shape (a whole row wider than shared memory holds)
is listed as such. Exit status 1 when a kernel fails to compile or spills registers.
"""

import argparse
import json
import os
import pathlib
import re
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp

import gpu_compile_blackwell as blackwell
import statickernel as sk
from gallery import example_module
from gpu_compile_rows import Row, tile
from gpu_matmul import hopper_matmul_config
from statickernel.cli.compile import write_dump

# The rows are the gallery at its declared constants, not at tunings cached on this machine
# (calls read the setting when they specialize).
os.environ.setdefault("STATICKERNEL_AUTOTUNE", "0")

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


_ATTENTION_BACKWARD = (((1, 16, 4096, 128), "bfloat16"),) * 4 + (((1, 16, 4096), "float32"),) * 2
_GROUPED = (((16384, 4096), "bfloat16"), ((8, 4096, 4096), "bfloat16"), ((8,), "int32"))

ROWS: tuple[Row, ...] = (
    # Tiled both ways: the GPU check's speed shape, and one row and column fewer.
    Row("add", "add", tile(8192, 4096, "float32", 2)),
    Row("add", "add", tile(8191, 4095, "float32", 2)),
    Row("add", "add", tile(8192, 8192, "float32", 2)),
    Row("scale_bias", "scale_bias", (((8192, 4096), "float32"), ((4096,), "float32"))),
    Row("scale_bias", "scale_bias", (((8191, 4095), "float32"), ((4095,), "float32"))),
    # Whole rows: the GPU check's shape, and the widths models use.
    Row("softmax", "softmax", tile(65536, 256, "float32")),
    Row("softmax", "softmax", tile(16384, 1024, "float32")),
    Row("softmax", "softmax", tile(16384, 4096, "float32")),
    Row("softmax", "softmax", tile(16384, 8192, "float32")),
    Row("softmax", "softmax", tile(16383, 4095, "float32")),
    Row("softmax", "softmax", tile(4096, 16384, "float32")),
    Row("rmsnorm", "rmsnorm", (((65536, 256), "float32"), ((256,), "float32"))),
    Row("rmsnorm", "rmsnorm", (((16384, 4096), "bfloat16"), ((4096,), "bfloat16"))),
    Row("rmsnorm", "rmsnorm", (((16384, 8192), "bfloat16"), ((8192,), "bfloat16"))),
    Row(
        "layernorm",
        "layernorm",
        (((65536, 256), "float32"), ((256,), "float32"), ((256,), "float32")),
    ),
    Row(
        "layernorm",
        "layernorm",
        (((16384, 1024), "float32"), ((1024,), "float32"), ((1024,), "float32")),
    ),
    # Rows that are not a multiple of 16 bytes, addressed flat (no host padding), and a
    # vocabulary of 50257 in chunks.
    Row("rmsnorm", "rmsnorm", (((16383, 4095), "bfloat16"), ((4095,), "bfloat16"))),
    Row(
        "layernorm",
        "layernorm",
        (((16384, 4095), "float32"), ((4095,), "float32"), ((4095,), "float32")),
    ),
    Row("softmax", "softmax", tile(4096, 50257, "bfloat16")),
    # The widest rows: past 16384 columns, passes over chunks of 8192 (a vocabulary's 32000
    # masked past its edge).
    Row("softmax", "softmax", tile(4096, 32768, "bfloat16")),
    Row("softmax", "softmax", tile(4096, 32000, "bfloat16")),
    Row("rmsnorm", "rmsnorm", (((4096, 32768), "bfloat16"), ((32768,), "bfloat16"))),
    Row(
        "layernorm",
        "layernorm",
        (((4096, 32768), "bfloat16"), ((32768,), "bfloat16"), ((32768,), "bfloat16")),
    ),
    # Backward kernels at the widths models use: per-row dx, and sums across blocks of rows.
    Row("softmax", "softmax_backward", tile(16384, 4096, "float32", 2)),
    Row(
        "rmsnorm",
        "rmsnorm_backward",
        (((16384, 4096), "bfloat16"), ((4096,), "bfloat16"), ((16384, 4096), "bfloat16")),
    ),
    Row(
        "layernorm",
        "layernorm_backward",
        (((16384, 4096), "bfloat16"), ((4096,), "bfloat16"), ((16384, 4096), "bfloat16")),
    ),
    Row(
        "rmsnorm",
        "rmsnorm_backward_rows",
        (((16384, 4096), "bfloat16"), ((4096,), "bfloat16"), ((16384, 4096), "bfloat16")),
    ),
    Row(
        "rmsnorm",
        "rmsnorm_backward_weight",
        (((16384, 4096), "bfloat16"), ((16384, 4096), "bfloat16"), ((16384,), "float32")),
    ),
    Row(
        "layernorm",
        "layernorm_backward_rows",
        (((16384, 4096), "bfloat16"), ((4096,), "bfloat16"), ((16384, 4096), "bfloat16")),
    ),
    Row(
        "layernorm",
        "layernorm_backward_params",
        (((16384, 4096), "bfloat16"), ((16384, 4096), "bfloat16")) + (((16384,), "float32"),) * 2,
    ),
    Row("cross_entropy", "cross_entropy", (((16384, 32000), "bfloat16"), ((16384,), "int32"))),
    Row(
        "cross_entropy",
        "cross_entropy_backward",
        (((16384, 32000), "bfloat16"), ((16384,), "int32"), ((), "float32")),
    ),
    Row("row_sum", "row_sum", tile(65536, 256, "float32")),
    Row("row_sum", "row_sum", tile(16384, 1024, "float32")),
    Row("row_sum", "row_sum", tile(4096, 16384, "float32")),
    # Loops: rows streamed block by block where they do not fit in shared memory, walked
    # there where they do; and the matmuls at the GPU check's sizes.
    Row("softmax_online", "softmax_online", tile(4096, 100_000, "float32")),
    Row(
        "layernorm_wide",
        "layernorm_wide",
        (((4096, 16384), "float32"), ((16384,), "float32"), ((16384,), "float32")),
    ),
    Row("softmax_online", "softmax_online", tile(16384, 8192, "float32")),
    Row(
        "layernorm_wide",
        "layernorm_wide",
        (((16384, 8192), "float32"), ((8192,), "float32"), ((8192,), "float32")),
    ),
    Row("matmul", "matmul", tile(4096, 4096, "bfloat16", 2)),
    Row("matmul", "matmul", tile(4095, 4095, "bfloat16", 2)),
    Row(
        "matmul_bias_gelu",
        "matmul_bias_gelu",
        (((4096, 4096), "bfloat16"), ((4096, 4096), "bfloat16"), ((4096,), "float32")),
    ),
    Row("batched_matmul", "batched_matmul", (((8, 1024, 1024), "bfloat16"),) * 2),
    Row("matmul", "matmul", (((4088, 4096), "bfloat16"), ((4096, 4096), "bfloat16"))),
    Row("matmul", "matmul", tile(8192, 8192, "bfloat16", 2)),
    # A bfloat16 result, as jax's hopper_matmul_mgpu writes (its row is the table's last).
    Row("matmul", "matmul", tile(4096, 4096, "bfloat16", 2), (("bf16_out", True),)),
    # 1-byte products: b comes (N, K).
    Row(
        "matmul_fp8",
        "matmul_fp8",
        tile(4096, 4096, "float8_e4m3fn", 2) + (((), "float32"),) * 2,
    ),
    Row("matmul_int8", "matmul_int8", tile(4096, 4096, "int8", 2)),
    # Decode steps: 1, 16 and 64 rows against 4096x4096 weights, the blocks narrowed by the
    # plan to 64 x 32, one a CTA; and with the declared blocks passed, the loop over K split
    # across CTAs.
    *(
        Row("matmul", "matmul", (((m, 4096), "bfloat16"), ((4096, 4096), "bfloat16")))
        for m in (1, 16, 64)
    ),
    Row(
        "matmul",
        "matmul",
        (((16, 4096), "bfloat16"), ((4096, 4096), "bfloat16")),
        (("bf16_out", True), ("BM", 128), ("BN", 128)),
    ),
    Row("matmul_int8", "matmul_int8", (((16, 4096), "int8"), ((4096, 4096), "int8"))),
    # Flash attention at the GPU check's sizes: the scores and p @ v in registers.
    Row("attention", "attention", (((1, 16, 4096, 128), "bfloat16"),) * 3),
    Row("attention", "attention", (((1, 16, 4095, 128), "bfloat16"),) * 3),
    Row("attention", "attention_lse", (((1, 16, 4096, 128), "bfloat16"),) * 3),
    # Causal: the blocks of keys before a block's first query unmasked, the diagonal's masked.
    Row("attention", "attention", (((1, 16, 4096, 128), "bfloat16"),) * 3, (("causal", True),)),
    # Its variants: a causal sliding window of 1024 keys (the loop walks only its blocks) and
    # Gemma 2's soft cap (a tanh a score).
    Row(
        "attention",
        "attention",
        (((1, 16, 4096, 128), "bfloat16"),) * 3,
        (("causal", True), ("window_left", 1024)),
    ),
    Row("attention", "attention", (((1, 16, 4096, 128), "bfloat16"),) * 3, (("softcap", 50.0),)),
    # The backward, causal: dq walks the keys, dk and dv walk the queries from the block's
    # first key, each query's lse and delta vectors along that loop.
    Row("attention", "attention_dq", _ATTENTION_BACKWARD, (("causal", True),)),
    Row("attention", "attention_dkdv", _ATTENTION_BACKWARD, (("causal", True),)),
    # Not causal, dk and dv of two blocks of keys a CTA: two consumer warpgroups share each
    # block of queries a producer copies.
    Row("attention", "attention_dkdv", _ATTENTION_BACKWARD),
    # ALiBi, causal: a slope a head, its bias in each block of scores; its dk/dv kernel sums
    # each key's part of the slopes' cotangent.
    Row(
        "attention_alibi",
        "attention_alibi",
        (*(((1, 16, 4096, 128), "bfloat16"),) * 3, ((16,), "float32")),
        (("causal", True),),
    ),
    Row(
        "attention_alibi",
        "attention_alibi_dkdv",
        (*_ATTENTION_BACKWARD, ((16,), "float32")),
        (("causal", True),),
    ),
    # Grouped-query attention, 32 query heads over 8 key heads, causal.
    Row(
        "attention_variants",
        "attention_gqa",
        (
            ((1, 8, 4, 4096, 128), "bfloat16"),
            ((1, 8, 4096, 128), "bfloat16"),
            ((1, 8, 4096, 128), "bfloat16"),
        ),
        (("causal", True),),
    ),
    Row(
        "attention_variants",
        "attention_gqa",
        (
            ((1, 8, 4, 4096, 128), "bfloat16"),
            ((1, 8, 4096, 128), "bfloat16"),
            ((1, 8, 4096, 128), "bfloat16"),
        ),
    ),
    # Decoding one token of 32 heads over 8 key heads against a cache of 32768 tokens, cut in
    # 16 parts of 2048 (128 grid steps): 4 query heads a key head as the rows of a block.
    Row(
        "attention_variants",
        "attention_decode_parts",
        (
            ((1, 8, 4, 128), "bfloat16"),
            ((1, 8, 16, 2048, 128), "bfloat16"),
            ((1, 8, 16, 2048, 128), "bfloat16"),
            ((1,), "int32"),
            ((16,), "int32"),
        ),
    ),
    # RoPE on q and k: the block sliced and joined in registers, angles shared by the heads.
    Row(
        "rope",
        "rope",
        (((1, 32, 4096, 128), "bfloat16"),) * 2 + (((4096, 128), "float32"),) * 2,
    ),
    Row(
        "rope",
        "rope",
        (((1, 32, 4096, 128), "bfloat16"),) * 2 + (((4096, 128), "bfloat16"),) * 2,
    ),
    # MLA's queries and keys (DeepSeek-V3: 128 heads, 128 + 64 columns): each head's part
    # without positions joined to its rotated part, the keys' shared by the heads.
    Row(
        "rope",
        "mla_rope",
        (
            ((1, 128, 4096, 128), "bfloat16"),
            ((1, 128, 4096, 64), "bfloat16"),
            ((1, 128, 4096, 128), "bfloat16"),
            ((1, 4096, 64), "bfloat16"),
            ((4096, 64), "float32"),
            ((4096, 64), "float32"),
        ),
    ),
    # MoE routers: top-8 of 64 experts (Qwen-style) and of 256 (DeepSeek-V3's count).
    Row("moe_router", "moe_router", (((16384, 64), "bfloat16"),), (("K", 8),)),
    Row("moe_router", "moe_router", (((16384, 256), "bfloat16"),), (("K", 8),)),
    # Mamba-2's chunked decay: a scan along chunks of 128 steps, in shared memory.
    Row(
        "cumsum",
        "chunk_decay",
        (((16384, 128), "bfloat16"), ((16384,), "float32"), ((16384,), "float32")),
    ),
    # A sampler's top-K over Llama 3's vocabulary, streamed: each step's top-K joined with the
    # carry's, ranked again, the ids taken along.
    Row("top_k", "top_k", (((64, 128256), "bfloat16"),)),
    Row("top_k", "top_k", (((4096, 32000), "float32"),), (("K", 16),)),
    # Nucleus sampling's filter: a scan of each whole row of sorted logits, the row form's.
    Row("cumsum", "top_p_mask", (((4096, 8192), "float32"),)),
    Row("cumsum", "top_p_mask", (((1024, 16384), "bfloat16"),)),
    # Mamba's causal conv1d (d_inner 5120, width 4), channels last: the rows above each block
    # are copied with it, and the 4 shifted windows read from shared memory.
    Row(
        "causal_conv1d",
        "causal_conv1d",
        (((4, 4096, 5120), "bfloat16"), ((4, 5120), "float32"), ((5120,), "float32")),
    ),
    # The same in Mamba's own layout, (batch, channels, sequence): each shifted block is a
    # TMA copy of its own from the shifted columns, the first block's from before the array.
    Row(
        "causal_conv1d",
        "causal_conv1d_channels_first",
        (((4, 5120, 4096), "bfloat16"), ((5120, 4), "float32"), ((5120,), "float32")),
    ),
    # Weight-only int8 (W8A16), the weight dequantized in registers a step: decoding 64 rows
    # against a 4096x4096 layer, and a prefill of 4096 rows (128x128 blocks).
    Row(
        "matmul_int8_weights",
        "matmul_w8a16",
        (((4096, 4096), "int8"), ((4096,), "float32"), ((64, 4096), "bfloat16")),
    ),
    Row(
        "matmul_int8_weights",
        "matmul_w8a16",
        (((4096, 4096), "int8"), ((4096,), "float32"), ((4096, 4096), "bfloat16")),
        (("BN", 128), ("BM", 128), ("BK", 64)),
    ),
    # Weight-only int4 with a scale per group of 128 along K (W4A16, GPTQ's layout): decoding
    # 64 rows against a 4096x4096 layer, and a prefill of 4096 rows (64x128 blocks).
    Row(
        "matmul_int4",
        "matmul_w4a16",
        (((4096, 4096), "int4"), ((32, 4096), "bfloat16"), ((64, 4096), "bfloat16")),
    ),
    Row(
        "matmul_int4",
        "matmul_w4a16",
        (((4096, 4096), "int4"), ((32, 4096), "bfloat16"), ((4096, 4096), "bfloat16")),
        (("BN", 64), ("BM", 128)),
    ),
    # The same with the weight laid out (K, N) (GPTQ's qweight): the product's b dequantized in
    # registers and staged through swizzled shared memory, no transpose after.
    Row(
        "matmul_int4",
        "linear_int4",
        (((64, 4096), "bfloat16"), ((4096, 4096), "int4"), ((32, 4096), "bfloat16")),
    ),
    Row(
        "matmul_int4",
        "linear_int4",
        (((4096, 4096), "bfloat16"), ((4096, 4096), "int4"), ((32, 4096), "bfloat16")),
        (("BM", 128),),
    ),
    # An embedding lookup: 8192 tokens' rows of a 128256 x 4096 bf16 table (Llama 3's),
    # each row gathered by a copy of its own.
    Row(
        "embedding",
        "embedding",
        (((128256, 4096), "bfloat16"), ((8192,), "int32")),
    ),
    # A KV-cache update in place: 4096 new tokens' rows of 8 heads of 128 bf16 scattered into
    # a cache of 65536 slots.
    Row(
        "kv_cache_update",
        "kv_cache_rows",
        (((65536, 1024), "bfloat16"), ((4096, 1024), "bfloat16"), ((4096,), "int32")),
    ),
    # Decode attention over a paged KV cache: 32 sequences of 4096 tokens in pages of 16,
    # 32 query heads over 8 key heads of 128, each page copied by a TMA copy of its own.
    Row(
        "paged_attention",
        "paged_attention_heads",
        (
            ((32, 8, 4, 128), "bfloat16"),
            ((8, 8192, 16, 128), "bfloat16"),
            ((8, 8192, 16, 128), "bfloat16"),
            ((32, 256), "int32"),
            ((32,), "int32"),
        ),
    ),
    # Block-scaled fp8 (DeepSeek-V3's scaling): 4096 tokens by 4096 by 7168, a product a K
    # step scaled by its scales into the accumulator.
    Row(
        "matmul_fp8_blockwise",
        "matmul_fp8_blockwise_steps",
        (
            ((4096, 7168), "float8_e4m3fn"),
            ((4096, 7168), "float8_e4m3fn"),
            ((56, 4096), "float32"),
            ((56, 4096), "float32"),
        ),
    ),
    # A fused MLP: the hidden block of each step stays in registers.
    Row(
        "mlp",
        "mlp",
        (((8192, 256), "bfloat16"), ((256, 1024), "bfloat16"), ((1024, 256), "bfloat16")),
    ),
    # A grouped matmul (MoE, jax.lax.ragged_dot): 16384 rows sorted into 8 groups, each
    # multiplied by its 4096 x 4096 weight; bf16 result as jax's ragged_dot_mgpu writes.
    Row("grouped_matmul", "grouped_matmul", _GROUPED),
    Row("grouped_matmul", "grouped_matmul", _GROUPED, (("bf16_out", True),)),
    # Random bits in registers, from a scalar seed read from global memory.
    Row("dropout", "dropout", (((8192, 4096), "float32"), ((), "uint32"))),
    Row("dropout", "dropout", (((8191, 4095), "bfloat16"), ((), "uint32"))),
)


# jax's own warp-specialized matmul, compiled the same way: the structural anchor of the
# table (registers, SASS mix) for statickernel's matmul at the same shape and configuration.
JAX_MATMUL = "hopper_matmul_mgpu"
JAX_RAGGED_DOT = "ragged_dot_mgpu"
JAX_ATTENTION = "attention_mgpu"
JAX_MIXED_MATMUL = "hopper_mixed_type_matmul_mgpu"
JAX_MATMUL_ROWS: tuple[Row, ...] = (
    Row("jax", JAX_MATMUL, tile(4096, 4096, "bfloat16", 2)),
    # jax's mixed-type matmul: an int8 `a` converted in registers times a bfloat16 `b`, the
    # anchor for the quantized-weight products (linear_int4 stages its converted b instead).
    Row("jax", JAX_MIXED_MATMUL, (((4096, 4096), "int8"), ((4096, 4096), "bfloat16"))),
    Row("jax", JAX_RAGGED_DOT, _GROUPED),
    # jax's FlashAttention-3-shaped forward at attention's shape, (B, S, H, D) as it takes it,
    # in float16 (its p @ v casts p to float16, which a bfloat16 v does not match).
    Row("jax", JAX_ATTENTION, (((1, 4096, 16, 128), "float16"),) * 3),
)


def _jax_matmul_report(row: Row, target: str) -> Any:
    """jax's `hopper_matmul_mgpu` at 128x128 blocks a consumer, 2 consumers along N (a CTA
    tile of 128x256), BK=64 and 4 stages: the configuration statickernel's matmul chooses."""
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hmm

    from statickernel.aot.compile import _compile  # the compile statickernel's own kernels get

    # The SM count of an H100/H200; a deviceless compile has no device to ask.
    hmm.get_num_sms = lambda: 132
    config = hopper_matmul_config()
    fn = jax.jit(lambda a, b: hmm.matmul(a, b, None, config))
    return _compile(fn, row.structs, JAX_MATMUL, target, 0, None)


def _jax_ragged_dot_report(row: Row, target: str) -> Any:
    """jax's `ragged_dot_mgpu` at 128 x 128 blocks, BK=64, 4 stages and bands of 8 column
    blocks: one warpgroup a CTA computes a block (it is not warp-specialized), 132 CTAs."""
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu as rdm

    from statickernel.aot.compile import _compile

    def run(x: jax.Array, w: jax.Array, group_sizes: jax.Array) -> jax.Array:
        return rdm.ragged_dot(
            x,
            w,
            group_sizes=group_sizes,
            block_m=128,
            block_n=128,
            block_k=64,
            max_concurrent_steps=4,
            grid_block_n=8,
        )

    return _compile(jax.jit(run), row.structs, JAX_RAGGED_DOT, target, 0, None)


def _jax_attention_report(row: Row, target: str) -> Any:
    """jax's `attention_mgpu` as the GPU check runs it: a producer warpgroup and two consumer
    warpgroups of 64 query rows each, blocks of 64 keys, 2 stages, not causal."""
    from jax.experimental.pallas.ops.gpu import attention_mgpu

    from statickernel.aot.compile import _compile

    config = attention_mgpu.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
    fn = jax.jit(lambda q, k, v: attention_mgpu.attention(q, k, v, config))
    return _compile(fn, row.structs, JAX_ATTENTION, target, 0, None)


def _jax_mixed_matmul_report(row: Row, target: str) -> Any:
    """jax's `hopper_mixed_type_matmul_mgpu` at 128x128 blocks a consumer warpgroup, two
    consumers along N, BK=64 and 4 stages, persistent over 132 SMs."""
    import types

    from jax.experimental.pallas.ops.gpu import hopper_mixed_type_matmul_mgpu as hmt

    from statickernel.aot.compile import _compile

    # The kernel asks the default device for its SM count; a deviceless compile has none.
    device = types.SimpleNamespace(core_count=132)
    hmt.backend = types.SimpleNamespace(get_default_device=lambda: device)  # type: ignore[attr-defined]
    config = hmt.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=4)

    def run(a: jax.Array, b: jax.Array) -> jax.Array:
        return hmt.mixed_matmul_kernel(a, b, out_dtype=jnp.bfloat16, config=config)

    return _compile(jax.jit(run), row.structs, JAX_MIXED_MATMUL, target, 0, None)


_JAX_REPORTS = {
    JAX_MATMUL: _jax_matmul_report,
    JAX_MIXED_MATMUL: _jax_mixed_matmul_report,
    JAX_RAGGED_DOT: _jax_ragged_dot_report,
    JAX_ATTENTION: _jax_attention_report,
}


def compile_row(row: Row, target: str, dump: str | None = None) -> dict[str, Any]:
    base = {"kernel": row.label, "shape": row.shape, "target": target}
    start = time.perf_counter()
    try:
        if row.module == "jax" and row.kernel == blackwell.JAX_BLACKWELL_MATMUL:
            report = blackwell.jax_blackwell_matmul_report(row, target)
        elif row.module == "jax":
            report = _JAX_REPORTS[row.kernel](row, target)
        else:
            kernel: sk.Kernel[..., Any] = getattr(example_module(row.module), row.kernel)
            report = kernel.compile(*row.structs, target=target, **dict(row.consts))
    except sk.HardwareRuleError as exc:
        return base | {"status": "not emitted", "reason": exc.what}
    except sk.StaticKernelError as exc:
        return base | {"status": "compile error", "reason": str(exc)}
    if dump:
        # Plain names: float32_65536x256, not float32[65536,256].
        label = re.sub(r"[^\w.-]+", "_", "-".join(row.shape).replace(",", "x")).strip("_")
        folder = pathlib.Path(dump) / f"{row.kernel}-{label}"
        write_dump(report, str(folder))
    facts = report.to_json()
    facts.pop("target", None)
    if target == "sm_100a":
        facts["tmem_columns"] = blackwell.tmem_columns(report.ptx)
        facts["mma_ctas"] = blackwell.mma_ctas(report.sass)
    status = "spills" if report.spill_store_bytes or report.spill_load_bytes else "ok"
    timing = {"status": status, "compile_s": round(time.perf_counter() - start, 2)}
    return base | facts | {"kernel": row.label} | timing


def markdown(rows: list[dict[str, Any]]) -> str:
    head = [
        "| kernel | operands | registers | spills (B) | SMEM (B) | CTAs/SM | limited by "
        "| loads in flight/SM (KiB) | GMMA | TMA loads | TMA/bulk copies | LDS/STS | STSM "
        "| setmaxnreg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines = []
    for r in rows:
        shape = ", ".join(r["shape"])
        if r["status"] in ("not emitted", "compile error"):
            lines.append(f"| {r['kernel']} | {shape} | {r['status']}: {r['reason']} |" + " |" * 11)
            continue
        s = r["sass"]
        flight = r.get("bytes_in_flight_per_sm")
        flight_text = f"{flight / 1024:,.0f}" if flight is not None else "-"
        lines.append(
            f"| {r['kernel']} | {shape} | {r['registers']} | {r['spill_bytes']} | "
            f"{r['smem_bytes']:,} | {r['ctas_per_sm']} | {r['limited_by']} | {flight_text} | "
            f"{s['HGMMA'] + s.get('QGMMA', 0) + s.get('IGMMA', 0)} | "
            f"{s['UTMALDG']} | {s['UTMASTG'] + s['UBLKCP']} | {s['LDS']}/{s['STS']} | "
            f"{s['STSM']} | {s['USETMAXREG']} |"
        )
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--target", default="sm_90a", choices=("sm_90a", "sm_100a"))
    parser.add_argument("--out", default=None, help="gpu-compile[-TARGET].json in results/")
    parser.add_argument("--markdown", default=None, help="gpu-compile[-TARGET].md in results/")
    parser.add_argument("--only", action="append", default=[], help="kernels to compile")
    parser.add_argument(
        "--dump", default=None, help="also write each row's PTX, SASS and ptxas log under DUMP"
    )
    args = parser.parse_args(argv)
    # sm_100a: the products generated for Blackwell, in files of their own.
    hopper = args.target == "sm_90a"
    stem = "gpu-compile" if hopper else f"gpu-compile-{args.target}"
    args.out = args.out or str(RESULTS / f"{stem}.json")
    args.markdown = args.markdown or str(RESULTS / f"{stem}.md")
    rows = []
    for row in ROWS + JAX_MATMUL_ROWS if hopper else blackwell.BLACKWELL_ROWS:
        if args.only and row.kernel not in args.only:
            continue
        result = compile_row(row, args.target, args.dump)
        rows.append(result)
        detail = (
            f"{result['registers']} registers, {result['spill_bytes']} B spilled, "
            f"{result['ctas_per_sm']} CTA/SM"
            if "registers" in result
            else result["reason"].splitlines()[0]
        )
        print(f"{result['status']:>13}  {row.label} {', '.join(row.shape)}: {detail}", flush=True)
    pathlib.Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    pathlib.Path(args.markdown).write_text(markdown(rows) if hopper else blackwell.markdown(rows))
    failed = [r for r in rows if r["status"] in ("compile error", "spills")]
    print(f"wrote {args.out} and {args.markdown}: {len(rows)} rows, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

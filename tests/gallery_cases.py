"""The gallery kernels at one ragged shape each: the shapes the golden files pin, shared by
the emitted-source tests and the compile-budget tests."""

from typing import Any

import jax
import jax.numpy as jnp

import statickernel as sk
from add import add
from attention import attention, attention_dkdv, attention_dq, attention_lse
from attention_alibi import attention_alibi, attention_alibi_dkdv, attention_alibi_dq
from attention_variants import (
    attention_decode_parts,
    attention_gqa,
    attention_packed,
    attention_packed_dkdv,
    attention_packed_dq,
)
from batched_matmul import batched_matmul
from causal_conv1d import causal_conv1d, causal_conv1d_channels_first
from cross_entropy import (
    cross_entropy,
    cross_entropy_backward,
    cross_entropy_rows,
    cross_entropy_rows_backward,
)
from cumsum import chunk_decay, top_p_mask
from dropout import dropout
from embedding import embedding
from grouped_matmul import grouped_matmul
from kv_cache_update import kv_cache_rows
from layernorm import (
    layernorm,
    layernorm_backward,
    layernorm_backward_params,
    layernorm_backward_rows,
)
from layernorm_wide import layernorm_wide
from matmul import matmul
from matmul_bias_gelu import matmul_bias_gelu
from matmul_fp8 import matmul_fp8
from matmul_fp8_blockwise import matmul_fp8_blockwise_steps
from matmul_int4 import linear_int4, matmul_w4a16
from matmul_int8 import matmul_int8
from matmul_int8_weights import matmul_w8a16
from mlp import mlp
from moe_router import moe_router
from norm_quant import norm_quant
from norm_saved_stats import (
    layernorm_backward_saved,
    layernorm_with_stats,
    rmsnorm_backward_saved,
    rmsnorm_with_rstd,
)
from paged_attention import paged_attention_heads
from rmsnorm import rmsnorm, rmsnorm_backward, rmsnorm_backward_rows, rmsnorm_backward_weight
from rope import mla_rope, rope
from row_sum import row_sum
from scale_bias import scale_bias
from softmax import softmax, softmax_backward
from softmax_online import softmax_online
from top_k import top_k

KERNELS: dict[str, sk.Kernel[..., Any]] = {
    "add": add,
    "scale_bias": scale_bias,
    "softmax": softmax,
    "rmsnorm": rmsnorm,
    "layernorm": layernorm,
    "row_sum": row_sum,
    "matmul": matmul,
    "matmul_bias_gelu": matmul_bias_gelu,
    "batched_matmul": batched_matmul,
    "matmul_fp8": matmul_fp8,
    "matmul_int8": matmul_int8,
    "softmax_online": softmax_online,
    "layernorm_wide": layernorm_wide,
    "softmax_backward": softmax_backward,
    "rmsnorm_backward": rmsnorm_backward,
    "rmsnorm_backward_rows": rmsnorm_backward_rows,
    "rmsnorm_backward_weight": rmsnorm_backward_weight,
    "layernorm_backward": layernorm_backward,
    "layernorm_backward_rows": layernorm_backward_rows,
    "layernorm_backward_params": layernorm_backward_params,
    "cross_entropy": cross_entropy,
    "cross_entropy_backward": cross_entropy_backward,
    "cross_entropy_rows": cross_entropy_rows,
    "cross_entropy_rows_backward": cross_entropy_rows_backward,
    "dropout": dropout,
    "attention": attention,
    "attention_lse": attention_lse,
    "mlp": mlp,
    "norm_quant": norm_quant,
    "rmsnorm_with_rstd": rmsnorm_with_rstd,
    "rmsnorm_backward_saved": rmsnorm_backward_saved,
    "layernorm_with_stats": layernorm_with_stats,
    "layernorm_backward_saved": layernorm_backward_saved,
    "rope": rope,
    "mla_rope": mla_rope,
    "moe_router": moe_router,
    "chunk_decay": chunk_decay,
    "top_p_mask": top_p_mask,
    "top_k": top_k,
    "causal_conv1d": causal_conv1d,
    "causal_conv1d_channels_first": causal_conv1d_channels_first,
    "matmul_w8a16": matmul_w8a16,
    "matmul_w4a16": matmul_w4a16,
    "linear_int4": linear_int4,
    "embedding": embedding,
    "kv_cache_rows": kv_cache_rows,
    "paged_attention_heads": paged_attention_heads,
    "matmul_fp8_blockwise_steps": matmul_fp8_blockwise_steps,
    "grouped_matmul": grouped_matmul,
    "attention_dq": attention_dq,
    "attention_dkdv": attention_dkdv,
    "attention_gqa": attention_gqa,
    "attention_packed": attention_packed,
    "attention_packed_dq": attention_packed_dq,
    "attention_packed_dkdv": attention_packed_dkdv,
    "attention_decode_parts": attention_decode_parts,
    "attention_alibi": attention_alibi,
    "attention_alibi_dq": attention_alibi_dq,
    "attention_alibi_dkdv": attention_alibi_dkdv,
}
# One ragged shape per kernel: M is not a multiple of BM, tiled N is not a multiple of BN,
# whole N is padded; scale_bias (bf16, 600 B rows) and layernorm (f32, 520 B rows) also take
# the host-padding fallback.
SHAPES: dict[str, list[tuple[tuple[int, ...], str]]] = {
    "add": [((100, 300), "float32"), ((100, 300), "float32")],
    "scale_bias": [((100, 300), "bfloat16"), ((300,), "bfloat16")],
    "softmax": [((100, 100), "float32")],
    "rmsnorm": [((100, 200), "bfloat16"), ((200,), "bfloat16")],
    "layernorm": [((100, 130), "float32"), ((130,), "float32"), ((130,), "float32")],
    "row_sum": [((100, 250), "float32")],
    # Loop kernels: ragged M, K and N, with WGMMA operands padded on the host.
    "matmul": [((130, 100), "bfloat16"), ((100, 260), "bfloat16")],
    "matmul_bias_gelu": [((130, 100), "bfloat16"), ((100, 20), "bfloat16"), ((20,), "float32")],
    "batched_matmul": [((2, 130, 100), "bfloat16"), ((2, 100, 260), "bfloat16")],
    # 1-byte products: b comes (N, K), K ragged against a 128-element block.
    "matmul_fp8": [
        ((130, 200), "float8_e4m3fn"),
        ((260, 200), "float8_e4m3fn"),
        ((), "float32"),
        ((), "float32"),
    ],
    "matmul_int8": [((130, 200), "int8"), ((260, 200), "int8")],
    "softmax_online": [((100, 1000), "float32")],
    "layernorm_wide": [((100, 1000), "float32"), ((1000,), "float32"), ((1000,), "float32")],
    # Backward kernels: per-row ones like their forwards, and the sums across blocks of rows
    # (ragged M, tiled N ragged too), whose partials the wrapper combines.
    "softmax_backward": [((100, 100), "float32"), ((100, 100), "float32")],
    # The one-pass backwards take the row form, whose CTAs add up their rows; 1001 rows in
    # blocks of 4 leave the last block ragged, its copied rows left out of the sums.
    "rmsnorm_backward": [
        ((1001, 2048), "bfloat16"),
        ((2048,), "bfloat16"),
        ((1001, 2048), "bfloat16"),
    ],
    "layernorm_backward": [
        ((1001, 1000), "float32"),
        ((1000,), "float32"),
        ((1001, 1000), "float32"),
    ],
    "rmsnorm_backward_rows": [
        ((100, 200), "bfloat16"),
        ((200,), "bfloat16"),
        ((100, 200), "bfloat16"),
    ],
    "rmsnorm_backward_weight": [
        ((100, 200), "bfloat16"),
        ((100, 200), "bfloat16"),
        ((100,), "float32"),
    ],
    "layernorm_backward_rows": [
        ((100, 130), "float32"),
        ((130,), "float32"),
        ((100, 130), "float32"),
    ],
    "layernorm_backward_params": [
        ((100, 130), "float32"),
        ((100, 130), "float32"),
        ((100,), "float32"),
        ((100,), "float32"),
    ],
    # The loss over a ragged vocabulary (1000 % 128), a scalar across the blocks of rows, and
    # its gradient, with the scalar cotangent read from global memory.
    "cross_entropy": [((100, 1000), "bfloat16"), ((100,), "int32")],
    "cross_entropy_backward": [((100, 1000), "bfloat16"), ((100,), "int32"), ((), "float32")],
    # The same loss on whole rows, at a vocabulary whose rows are not a multiple of 16 bytes.
    "cross_entropy_rows": [((100, 1001), "bfloat16"), ((100,), "int32")],
    "cross_entropy_rows_backward": [
        ((100, 1001), "bfloat16"),
        ((100,), "int32"),
        ((), "float32"),
    ],
    # Random bits from a scalar seed operand, ragged M and N.
    "dropout": [((100, 300), "float32"), ((), "uint32")],
    # Flash attention: ragged queries (100 % 64) and keys (300 % 64), the keys host-padded to
    # a multiple of 8 rows.
    "attention": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
    ],
    # A chained product over a ragged hidden dim (1000 % 64), the hidden block in registers.
    "mlp": [((300, 256), "bfloat16"), ((256, 1000), "bfloat16"), ((1000, 128), "bfloat16")],
    # An fp8 result of a whole-row body, rows of 200 B of e4m3fn (not a multiple of 16 B:
    # host-padded) beside a per-row float32 scale.
    "norm_quant": [((100, 200), "bfloat16"), ((100, 200), "bfloat16"), ((200,), "bfloat16")],
    # Norms that save their per-row statistics, and one-pass backwards that read them: a
    # per-row operand keeps whole rows in the row form, each row reading its element.
    "rmsnorm_with_rstd": [((100, 200), "bfloat16"), ((200,), "bfloat16")],
    "rmsnorm_backward_saved": [
        ((1001, 2048), "bfloat16"),
        ((2048,), "bfloat16"),
        ((1001, 2048), "bfloat16"),
        ((1001,), "float32"),
    ],
    "layernorm_with_stats": [((100, 130), "float32"), ((130,), "float32"), ((130,), "float32")],
    "layernorm_backward_saved": [
        ((1001, 1000), "float32"),
        ((1000,), "float32"),
        ((1001, 1000), "float32"),
        ((1001,), "float32"),
        ((1001,), "float32"),
    ],
    # Rotate-half on q and k, the block sliced and joined in registers; ragged T, float32
    # angles shared by every head.
    "rope": [
        ((2, 3, 100, 64), "bfloat16"),
        ((2, 3, 100, 64), "bfloat16"),
        ((100, 64), "float32"),
        ((100, 64), "float32"),
    ],
    # MLA's heads: a part without positions of 40 columns beside a rotated part of 32, joined
    # into 72; k_pe shared by the heads; ragged T.
    "mla_rope": [
        ((2, 3, 100, 40), "bfloat16"),
        ((2, 3, 100, 32), "bfloat16"),
        ((2, 3, 100, 40), "bfloat16"),
        ((2, 100, 32), "bfloat16"),
        ((100, 32), "float32"),
        ((100, 32), "float32"),
    ],
    # Top-2 of 60 experts: the experts' columns padded to 64, K = 2 padded to 8 in registers
    # and to 4 (16-byte rows) on the host; ragged T.
    "moe_router": [((100, 60), "bfloat16")],
    # A scan along whole chunks of 100 steps (padded to 104), ragged rows.
    "chunk_decay": [((100, 100), "bfloat16"), ((100,), "float32"), ((100,), "float32")],
    # Ragged L (its first block reads the 3 rows above as zeros), ragged C; 4 taps a channel.
    "causal_conv1d": [((2, 100, 72), "bfloat16"), ((4, 72), "float32"), ((72,), "float32")],
    # Mamba's layout: ragged L along the columns (its first block's windows start before the
    # array), ragged C; the weight (C, 4) as Mamba stores it.
    "causal_conv1d_channels_first": [
        ((2, 72, 100), "bfloat16"),
        ((72, 4), "float32"),
        ((72,), "float32"),
    ],
    # Ragged N and K (int8 rows of 208 bytes), 5 rows of activations (M padded to 8).
    "matmul_w8a16": [((100, 208), "int8"), ((100,), "float32"), ((5, 208), "bfloat16")],
    # Ragged N and K (int4 rows of 100 bytes, padded on the host), two groups of K (the last
    # partial), 5 rows of activations.
    "matmul_w4a16": [((100, 200), "int4"), ((2, 100), "bfloat16"), ((5, 200), "bfloat16")],
    # The same weight laid out (K, N), the product's b dequantized and staged in shared memory:
    # a ragged last step (200 % 128) whose rows of b are zeroed, ragged N copied from column 0
    # of a view of its blocks.
    # 5 rows of 5000 sorted logits: the row form (the block form's 64 rows do not fit), a
    # scan of each row in two groups of 4096 elements a round, 904 columns padded past 5000.
    "top_p_mask": [((5, 5000), "float32")],
    # 100 rows of 1030 logits: 9 steps of 128 (the last of 6 columns, fewer than K=8), each
    # step's top-K joined with the carry's and ranked again, the ids taken along.
    "top_k": [((100, 1030), "float32")],
    "linear_int4": [((5, 200), "bfloat16"), ((200, 100), "int4"), ((2, 100), "bfloat16")],
    # 100 ids (ragged: 100 % 64) into a table of 1000 rows of 300 float32 (ragged: 300 % 256),
    # each row gathered by a copy of its own.
    "embedding": [((1000, 300), "float32"), ((100,), "int32")],
    # 70 new rows (ragged: 70 % 64) scattered into a cache of 300 rows of 200 bfloat16 (ragged:
    # 200 % 256), in place, each row by a copy of its own.
    "kv_cache_rows": [((300, 200), "bfloat16"), ((70, 200), "bfloat16"), ((70,), "int32")],
    # Decode attention over a paged cache: 2 sequences a table of 7 pages of 16 rows (112
    # tokens: ragged, 112 % 64), 4 query heads a key head, 40 pages in the pool.
    "paged_attention_heads": [
        ((2, 2, 4, 64), "bfloat16"),
        ((2, 40, 16, 64), "bfloat16"),
        ((2, 40, 16, 64), "bfloat16"),
        ((2, 7), "int32"),
        ((2,), "int32"),
    ],
    # Block-scaled fp8: ragged M, N and K (a partial third scale block), the step's scales a
    # vector along the rows and one along the columns.
    "matmul_fp8_blockwise_steps": [
        ((100, 300), "float8_e4m3fn"),
        ((130, 300), "float8_e4m3fn"),
        ((3, 100), "float32"),
        ((3, 130), "float32"),
    ],
    # A grouped matmul: 300 rows (ragged, 300 % 128) in 4 groups of 4 weights 200 x 260 (K and
    # N ragged), walked as (group, row block) items.
    "grouped_matmul": [((300, 200), "bfloat16"), ((4, 200, 260), "bfloat16"), ((4,), "int32")],
    # With the log-sum-exp, a per-row result of each head, written in whole blocks.
    "attention_lse": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
    ],
    # The backward: dq walks the keys; dk, dv walk the queries, each query's lse and delta
    # vectors along that loop (100 of them: 400 B rows, host-padded to 16 B).
    "attention_dq": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 100), "float32"),
        ((1, 2, 100), "float32"),
    ],
    "attention_dkdv": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 100), "float32"),
        ((1, 2, 100), "float32"),
    ],
    # Grouped-query attention: 2 key heads of 3 query heads each (G a batch dim k lacks).
    "attention_gqa": [
        ((1, 2, 3, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
    ],
    # Packed sequences: the keys' segment ids, a vector along the loop (101: host-padded).
    "attention_packed": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 101, 64), "bfloat16"),
        ((1, 2, 101, 64), "bfloat16"),
        ((1, 100), "int32"),
        ((1, 101), "int32"),
    ],
    "attention_packed_dq": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 101, 64), "bfloat16"),
        ((1, 2, 101, 64), "bfloat16"),
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 100), "float32"),
        ((1, 2, 100), "float32"),
        ((1, 100), "int32"),
        ((1, 101), "int32"),
    ],
    "attention_packed_dkdv": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 101, 64), "bfloat16"),
        ((1, 2, 101, 64), "bfloat16"),
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 100), "float32"),
        ((1, 2, 100), "float32"),
        ((1, 100), "int32"),
        ((1, 101), "int32"),
    ],
    # Decoding: 2 sequences, 2 key heads of 4 query heads and one new token each, the cache
    # of 300 tokens cut into 3 parts of 100 (ragged in their blocks of 64).
    "attention_decode_parts": [
        ((2, 2, 4, 64), "bfloat16"),
        ((2, 2, 3, 100, 64), "bfloat16"),
        ((2, 2, 3, 100, 64), "bfloat16"),
        ((2,), "int32"),
        ((3,), "int32"),
    ],
    # ALiBi: a slope a head, a 0-d operand of each grid step; the dk/dv kernel's per-key
    # sums of the slopes' cotangent, a vector along its rows.
    "attention_alibi": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((2,), "float32"),
    ],
    "attention_alibi_dq": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 100), "float32"),
        ((1, 2, 100), "float32"),
        ((2,), "float32"),
    ],
    "attention_alibi_dkdv": [
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 300, 64), "bfloat16"),
        ((1, 2, 100, 64), "bfloat16"),
        ((1, 2, 100), "float32"),
        ((1, 2, 100), "float32"),
        ((2,), "float32"),
    ],
}


# The schedules the gallery's shapes above do not reach, pinned by golden files of their own:
# (the gallery kernel, its operands).
SCHEDULES: dict[str, tuple[str, list[tuple[tuple[int, ...], str]]]] = {
    # Whole rows in the row form, one block a CTA, ragged rows and host-padded columns.
    "softmax-rows": ("softmax", [((1001, 1000), "float32")]),
    # The row form, persistent: a per-column weight, bf16 rows.
    "rmsnorm-rows-persistent": ("rmsnorm", [((16384, 4096), "bfloat16"), ((4096,), "bfloat16")]),
    # A per-row result written an element a row from registers, persistent.
    "row_sum-rows-persistent": ("row_sum", [((16384, 1024), "float32")]),
    # The strided block of an elementwise body, persistent.
    "add-persistent": ("add", [((8192, 8192), "float32"), ((8192, 8192), "float32")]),
    # A product of 256 rows: the loop over K split across CTAs, partial sums added after.
    "matmul-split": ("matmul", [((256, 4096), "bfloat16"), ((4096, 4096), "bfloat16")]),
    # A decode step's product: the blocks narrowed to 64 x 32 (a 64-byte swizzle), 128 CTAs
    # each streaming its columns of the weight, no split.
    "matmul-skinny": ("matmul", [((16, 4096), "bfloat16"), ((4096, 4096), "bfloat16")]),
    # A vocabulary-wide row, too wide for the registers: passes over its chunks, masked past
    # the array's last column.
    "softmax-row-chunks": ("softmax", [((4096, 32000), "bfloat16")]),
    # Rows of 8,190 bytes, addressed flat (no host padding): 1-D TMA boxes in, register
    # stores out, persistent, beside a weight.
    "rmsnorm-flat-rows": ("rmsnorm", [((16383, 4095), "bfloat16"), ((4095,), "bfloat16")]),
    # Loops over rows too wide for shared memory (400 KB): a pipeline a loop, each reading x.
    "softmax_online-pipelined": ("softmax_online", [((130, 100_000), "float32")]),
    # Loops in the row form, persistent: each loop walks the row held in shared memory, the
    # rows of 16,380 bytes addressed flat.
    "layernorm_wide-rows": (
        "layernorm_wide",
        [((16384, 4095), "float32"), ((4095,), "float32"), ((4095,), "float32")],
    ),
    # A large product: clusters of two CTAs along M, b's block multicast to both.
    "matmul-cluster": ("matmul", [((4096, 256), "bfloat16"), ((256, 4096), "bfloat16")]),
    # Blackwell: tcgen05 into tensor memory, the accumulator loaded after the loop; ragged.
    "matmul-sm_100a": ("matmul", [((300, 200), "bfloat16"), ((200, 260), "bfloat16")]),
    # Blackwell: a step's products through tensor memory, p staged in shared memory, BQ 128.
    "attention-sm_100a": ("attention", [((1, 2, 200, 64), "bfloat16")] * 3),
}
# The golden cases generated for another target than the default's (sm_90a).
TARGETED = {"matmul-sm_100a": "sm_100a", "attention-sm_100a": "sm_100a"}


def structs(name: str) -> list[jax.ShapeDtypeStruct]:
    shapes = SCHEDULES[name][1] if name in SCHEDULES else SHAPES[name]
    return [jax.ShapeDtypeStruct(shape, jnp.dtype(dt)) for shape, dt in shapes]


def kernel_of(name: str) -> sk.Kernel[..., Any]:
    """The gallery kernel of a golden case: a gallery name, or a schedule's."""
    kernel = KERNELS[SCHEDULES[name][0] if name in SCHEDULES else name]
    return kernel.with_target(TARGETED[name]) if name in TARGETED else kernel

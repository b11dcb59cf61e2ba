"""What the GPU check runs: its shapes, repeats and time budget, on a GPU and in a dry run,
and the goals its figures are held to."""

import dataclasses
import time

__all__ = [
    "BEATS_XLA",
    "COPY_BOUND",
    "DRY_RUN",
    "GOAL_ATTENTION_CAUSAL",
    "GOAL_ATTENTION_RAGGED",
    "GOAL_ATTENTION_VS_CUDNN",
    "GOAL_ATTENTION_VS_MGPU",
    "GOAL_COPY_FRACTION",
    "GOAL_GRAD_BEATS_XLA",
    "GOAL_MATMUL_FRACTION",
    "GOAL_RAGGED",
    "GOAL_VS_HANDWRITTEN",
    "GPU",
    "AttentionShape",
    "Budget",
    "Case",
    "DecodeShape",
    "GradShape",
    "MatmulShape",
    "MlpShape",
    "Settings",
    "SpeedShape",
]

# Goals the GPU figures are held to.
GOAL_COPY_FRACTION = 0.85  # memory-bound kernels, of the measured copy bandwidth
GOAL_VS_HANDWRITTEN = 1.03  # statickernel time / hand-written time
GOAL_RAGGED = 1.05  # ragged time per byte / aligned time per byte
GOAL_MATMUL_FRACTION = 0.90  # of jnp.dot's throughput, bf16 at 4096^3 and 8192^3
GOAL_MATMUL_RAGGED_M = 1.05  # M = 4088 time per flop / 4096^3's, at most (no host padding)
GOAL_MATMUL_RAGGED = 1.10  # 4095^3 time per flop / 4096^3's, at most
GOAL_MATMUL_VS_MGPU = 1.0  # hopper_matmul_mgpu time / statickernel time, at least
GOAL_CLUSTER_GAIN = 1.0  # the matmul's time without clusters / with them, at least
GOAL_FP8_FRACTION = 0.80  # of jnp.dot's throughput on the same fp8 arrays, at 4096^3
COPY_BOUND = ("add", "scale_bias", "softmax", "rmsnorm", "layernorm")  # held to the copy goal
BEATS_XLA = ("softmax", "rmsnorm", "layernorm")  # expected faster than XLA
GOAL_GRAD_BEATS_XLA = ("rmsnorm", "layernorm")  # jax.grad expected faster than XLA's
GOAL_ATTENTION_VS_CUDNN = 0.90  # cuDNN time / statickernel time, at least
GOAL_ATTENTION_VS_MGPU = 1.0  # attention_mgpu time / statickernel time, more than
GOAL_ATTENTION_RAGGED = 1.05  # S = 4095 time / S = 4096 time, at most
GOAL_ATTENTION_CAUSAL = 0.60  # causal time / full time, at most (half the blocks, and masks)
GOAL_GROUPED_VS_MATMUL = 0.90  # matmul time (equal FLOPs) / grouped matmul time, at least
GOAL_PAGED_FRACTION = 0.80  # paged attention's pages read a second, of the copy bandwidth
GOAL_ATTENTION_GRAD_VS_CUDNN = 0.80  # cuDNN's jax.grad time / statickernel's, at least
GOAL_DECODE_FRACTION = 0.80  # decoding's cache read a second, of the copy bandwidth


@dataclasses.dataclass(frozen=True)
class Case:
    label: str
    m: int
    n: int
    dtype: str


@dataclasses.dataclass(frozen=True)
class SpeedShape:
    """A shape the speed part times, for some or all of the gallery's kernels."""

    m: int
    n: int
    dtype: str = "float32"
    kernels: tuple[str, ...] | None = None  # None: every gallery kernel
    # A ragged shape: the aligned (M, N) its time per byte is judged against.
    ragged_of: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        return "ragged" if self.ragged_of else "aligned"

    def times(self, kernel: str) -> bool:
        return self.kernels is None or kernel in self.kernels


@dataclasses.dataclass(frozen=True)
class GradShape:
    """A shape the training part times `jax.grad` of one kernel's loss at."""

    kernel: str
    m: int
    n: int
    dtype: str


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    """A flash-attention forward the attention part times, bf16 (B, H, S, D), Sq = Skv = S."""

    b: int
    h: int
    s: int
    d: int
    causal: bool = False
    # The (S, causal) of the same B, H, D this one's time is judged against: the aligned
    # length for a ragged one, the full attention for a causal one.
    versus: tuple[int, bool] | None = None


@dataclasses.dataclass(frozen=True)
class MatmulShape:
    """A matmul the matmul part times: a (M, K) by b (K, N). `kind` is "bf16" (a float32
    result, against jnp.dot), "bf16-out" (a bfloat16 result, also against jax's
    hopper_matmul_mgpu) or "fp8" (e4m3fn, b given (N, K), against jnp.dot of the same)."""

    m: int
    k: int
    n: int
    kind: str = "bf16"
    # The (M, K, N) of the same kind this one's time per flop is judged against.
    versus: tuple[int, int, int] | None = None


@dataclasses.dataclass(frozen=True)
class GroupedShape:
    """A grouped matmul the grouped part times: x (M, K) in G groups, w (G, K, N), bf16."""

    m: int
    k: int
    n: int
    g: int


@dataclasses.dataclass(frozen=True)
class PagedShape:
    """A paged decode attention the paged part times: q (B, H, D), Hkv key heads, each of
    the B sequences `tokens` long in pages of `page` rows, bf16."""

    b: int
    h: int
    hkv: int
    d: int
    tokens: int
    page: int


@dataclasses.dataclass(frozen=True)
class DecodeShape:
    """A decoding attention the decode part times: one token of H heads a sequence against a
    contiguous cache of `tokens` tokens of Hkv heads (all of them the sequence's), bf16."""

    b: int
    h: int
    hkv: int
    d: int
    tokens: int


@dataclasses.dataclass(frozen=True)
class CacheUpdateShape:
    """A KV-cache update the paged part times: `tokens` rows of Hkv x D written into a
    cache of `slots` rows, bf16."""

    slots: int
    hkv: int
    d: int
    tokens: int


@dataclasses.dataclass(frozen=True)
class MlpShape:
    """A fused MLP the chained-product part times: x (M, K), w1 (K, H), w2 (H, N), bf16."""

    m: int
    k: int
    h: int
    n: int


@dataclasses.dataclass(frozen=True)
class Settings:
    dry_run: bool
    backend: str  # statickernel's backend
    interpret: bool  # the hand-written kernels'
    warmup: int
    runs: int
    min_run_s: float
    budget_s: float  # later measurements are skipped past this
    # Correctness cases for kernels tiled both ways, and for kernels with whole rows. Up to
    # 256 float32 (512 bfloat16) columns, 64 whole rows fit a block's shared memory; wider
    # rows take statickernel's row form, where the hand-written kernel does not run.
    tiled_cases: tuple[Case, ...]
    row_cases: tuple[Case, ...]
    # Speed, in this order: what the time budget cuts comes last.
    speed: tuple[SpeedShape, ...]
    copy_shape: tuple[int, int]
    matmul: tuple[MatmulShape, ...]
    grad: tuple[GradShape, ...] = ()  # jax.grad through the backward kernels, against XLA's
    attention: tuple[AttentionShape, ...] = ()  # flash attention against cuDNN and Pallas'
    mlp: tuple[MlpShape, ...] = ()  # the fused MLP against XLA's two products
    grouped: tuple[GroupedShape, ...] = ()  # against matmul, ragged_dot and ragged_dot_mgpu
    paged: tuple[PagedShape, ...] = ()  # paged attention against jax's and XLA
    cache_update: tuple[CacheUpdateShape, ...] = ()  # the in-place update against XLA's
    attention_backward: tuple[AttentionShape, ...] = ()  # jax.grad against cuDNN's and XLA's
    decode: tuple[DecodeShape, ...] = ()  # decoding against XLA, as a fraction of copy
    tune: tuple[MatmulShape, ...] = ()  # the matmul tuned on the device, against its defaults


# The goals' shapes, in the order they are measured.
_WIDE_ROWS = BEATS_XLA  # the kernels timed against XLA at the widths models use
_GPU_SPEED = (
    # Every kernel, aligned and ragged (one row and one column short): the copy fraction, XLA
    # and the ragged cost. 4095 float32 columns are 16,380 B, so the ragged shape is also
    # the host-padding fallback.
    SpeedShape(16384, 4096),
    SpeedShape(16383, 4095, ragged_of=(16384, 4096)),
    # The other widths the whole-row kernels are held to against XLA.
    SpeedShape(16384, 1024, kernels=_WIDE_ROWS),
    SpeedShape(16384, 8192, kernels=_WIDE_ROWS),
    SpeedShape(8192, 8192, kernels=("add",)),
    SpeedShape(16384, 4096, "bfloat16", kernels=("rmsnorm",)),
    # Narrow rows: 64-row blocks, the only whole-row shape the hand-written kernels run at.
    SpeedShape(65536, 256, kernels=("softmax", "rmsnorm", "layernorm", "row_sum")),
)

GPU = Settings(
    dry_run=False,
    backend="mosaic_gpu",
    interpret=False,
    warmup=2,
    runs=15,
    min_run_s=0.02,
    budget_s=180.0,
    # A few cases a kernel: each compiles twice (statickernel, hand-written, where the
    # hand-written kernel runs), and Mosaic GPU compiles take about a second.
    tiled_cases=(
        Case("aligned", 8192, 1024, "float32"),
        Case("ragged", 8191, 1000, "float32"),
        Case("ragged", 8191, 1000, "bfloat16"),
    ),
    row_cases=(
        Case("aligned", 8192, 256, "float32"),
        Case("ragged, host-padded", 8191, 255, "float32"),
        Case("aligned, 2 boxes", 8192, 512, "bfloat16"),
        # The row form: 1001 rows in blocks of a few rows leave the last block ragged.
        Case("wide, ragged rows", 1001, 4096, "float32"),
        Case("wide, host-padded", 17, 4095, "bfloat16"),
    ),
    speed=_GPU_SPEED,
    copy_shape=(16384, 4096),
    matmul=(
        MatmulShape(4096, 4096, 4096),
        MatmulShape(8192, 8192, 8192),
        MatmulShape(4088, 4096, 4096, versus=(4096, 4096, 4096)),
        MatmulShape(4095, 4095, 4095, versus=(4096, 4096, 4096)),
        MatmulShape(4096, 4096, 4096, "bf16-out"),
        MatmulShape(8192, 8192, 8192, "bf16-out"),
        MatmulShape(4096, 4096, 4096, "fp8"),
        # Decode steps: 16 rows against a weight, in the blocks the plan narrows them to.
        MatmulShape(16, 4096, 4096),
        MatmulShape(16, 8192, 8192),
    ),
    attention=(
        AttentionShape(1, 16, 4096, 128),
        AttentionShape(1, 16, 4095, 128, versus=(4096, False)),
        AttentionShape(1, 16, 4096, 128, causal=True, versus=(4096, False)),
        AttentionShape(1, 16, 8192, 128),
    ),
    mlp=(MlpShape(16384, 256, 1024, 256), MlpShape(16383, 256, 1000, 256)),
    tune=(MatmulShape(4096, 4096, 4096), MatmulShape(64, 4096, 4096)),
    grouped=(GroupedShape(16384, 4096, 4096, 8),),
    # Decode over 4096 tokens in pages of 16: a batch that fills the GPU, and one split.
    paged=(PagedShape(32, 32, 8, 128, 4096, 16), PagedShape(4, 32, 8, 128, 4096, 16)),
    cache_update=(CacheUpdateShape(65536, 8, 128, 4096),),
    attention_backward=(
        AttentionShape(1, 16, 4096, 128),
        AttentionShape(1, 16, 4096, 128, causal=True),
    ),
    # One sequence of 32768 tokens (split 16 ways), and a batch of 8 of 8192 (split 2 ways).
    decode=(DecodeShape(1, 32, 8, 128, 32768), DecodeShape(8, 32, 8, 128, 8192)),
    grad=(
        GradShape("rmsnorm", 16384, 4096, "bfloat16"),
        GradShape("layernorm", 16384, 4096, "bfloat16"),
        GradShape("softmax", 16384, 4096, "float32"),
        GradShape("cross_entropy", 16384, 32000, "bfloat16"),
        # A vocabulary whose rows are not a multiple of 16 bytes: blocked (padded on the host)
        # beside whole rows (addressed flat, read once).
        GradShape("cross_entropy", 16384, 50257, "bfloat16"),
        GradShape("cross_entropy_rows", 16384, 50257, "bfloat16"),
    ),
)
DRY_RUN = Settings(
    dry_run=True,
    backend="interpret",
    interpret=True,
    warmup=0,  # the compile call before the timed runs warms up enough for a rehearsal
    runs=2,
    min_run_s=0.0,
    budget_s=120.0,
    tiled_cases=(
        Case("aligned", 128, 256, "float32"),
        Case("ragged", 127, 250, "bfloat16"),
    ),
    # One ragged case covers ragged rows and columns, host padding and two boxes per row;
    # the wide one, the row form.
    row_cases=(
        Case("aligned", 64, 256, "float32"),
        Case("ragged, host-padded, 2 boxes", 63, 510, "bfloat16"),
        Case("wide, host-padded", 5, 1023, "bfloat16"),
    ),
    # The GPU run's kinds of shape, small: aligned and ragged for every kernel, and wide rows
    # (the row form, where the hand-written kernels do not run) in float32 and bfloat16.
    speed=(
        SpeedShape(64, 128),
        SpeedShape(63, 127, ragged_of=(64, 128)),
        SpeedShape(64, 1024, kernels=_WIDE_ROWS),
        SpeedShape(64, 1024, "bfloat16", kernels=("rmsnorm",)),
    ),
    copy_shape=(256, 256),
    matmul=(
        MatmulShape(256, 128, 256),
        MatmulShape(255, 127, 255, versus=(256, 128, 256)),
        MatmulShape(256, 128, 256, "bf16-out"),
        MatmulShape(256, 128, 256, "fp8"),
        MatmulShape(8, 1024, 256),  # a decode step: its blocks narrowed by the plan
    ),
    attention=(
        AttentionShape(1, 2, 128, 64),
        AttentionShape(1, 2, 127, 64, versus=(128, False)),
        AttentionShape(1, 2, 128, 64, causal=True, versus=(128, False)),
    ),
    mlp=(MlpShape(127, 64, 200, 64),),
    tune=(MatmulShape(256, 128, 256),),
    grouped=(GroupedShape(300, 128, 256, 4),),
    paged=(PagedShape(2, 8, 2, 64, 100, 16),),
    cache_update=(CacheUpdateShape(256, 2, 64, 20),),
    attention_backward=(AttentionShape(1, 2, 128, 64, causal=True),),
    decode=(DecodeShape(1, 4, 2, 64, 512),),
    grad=(
        GradShape("rmsnorm", 63, 256, "bfloat16"),
        GradShape("cross_entropy", 63, 300, "float32"),
        GradShape("cross_entropy_rows", 63, 1001, "bfloat16"),
    ),
)


class Budget:
    """Wall-clock time left for measurements; what does not fit is skipped, not cut short."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def spent(self) -> bool:
        return time.monotonic() > self.deadline

"""What the GPU check runs: its shapes, repeats and time budget, on a GPU and in a dry run,
and the goals its figures are held to."""

import dataclasses
import time

__all__ = [
    "BEATS_XLA",
    "DRY_RUN",
    "GOAL_COPY_FRACTION",
    "GOAL_MATMUL_FRACTION",
    "GOAL_RAGGED",
    "GOAL_VS_HANDWRITTEN",
    "GPU",
    "Budget",
    "Case",
    "Settings",
]

# Goals the GPU figures are held to.
GOAL_COPY_FRACTION = 0.85  # memory-bound kernels, of the measured copy bandwidth
GOAL_VS_HANDWRITTEN = 1.03  # statickernel time / hand-written time
GOAL_RAGGED = 1.05  # ragged time per byte / aligned time per byte
GOAL_MATMUL_FRACTION = 0.80  # of jnp.dot at 4096^3 bf16, once statickernel has a matmul
BEATS_XLA = ("softmax", "rmsnorm", "layernorm")  # expected faster than XLA


@dataclasses.dataclass(frozen=True)
class Case:
    label: str
    m: int
    n: int
    dtype: str


@dataclasses.dataclass(frozen=True)
class Settings:
    dry_run: bool
    backend: str  # statickernel's backend
    interpret: bool  # the hand-written kernels'
    warmup: int
    runs: int
    min_run_s: float
    budget_s: float  # later measurements are skipped past this
    # Correctness cases for kernels tiled both ways, and for kernels with whole rows (N is
    # whole in each block, so shared memory bounds it: 256 f32 or 512 bf16 columns).
    tiled_cases: tuple[Case, ...]
    row_cases: tuple[Case, ...]
    # Speed: (aligned rows, columns); the ragged shape has one row fewer.
    tiled_speed: tuple[int, int]
    row_speed: tuple[int, int]
    copy_shape: tuple[int, int]
    matmul_sizes: tuple[int, ...]


GPU = Settings(
    dry_run=False,
    backend="mosaic_gpu",
    interpret=False,
    warmup=2,
    runs=15,
    min_run_s=0.02,
    budget_s=210.0,
    # Three cases a kernel: each compiles twice (statickernel, hand-written), and Mosaic GPU
    # compiles take seconds.
    tiled_cases=(
        Case("aligned", 8192, 1024, "float32"),
        Case("ragged", 8191, 1000, "float32"),
        Case("ragged", 8191, 1000, "bfloat16"),
    ),
    row_cases=(
        Case("aligned", 8192, 256, "float32"),
        Case("ragged, host-padded", 8191, 255, "float32"),
        Case("aligned, 2 boxes", 8192, 512, "bfloat16"),
    ),
    tiled_speed=(8192, 4096),
    row_speed=(65536, 256),
    copy_shape=(16384, 4096),
    matmul_sizes=(4096, 4095),
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
    # One ragged case covers ragged rows and columns, host padding and two boxes per row.
    row_cases=(
        Case("aligned", 64, 256, "float32"),
        Case("ragged, host-padded, 2 boxes", 63, 510, "bfloat16"),
    ),
    tiled_speed=(64, 128),
    row_speed=(64, 128),
    copy_shape=(256, 256),
    matmul_sizes=(128, 127),
)


class Budget:
    """Wall-clock time left for measurements; what does not fit is skipped, not cut short."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def spent(self) -> bool:
        return time.monotonic() > self.deadline

#!/usr/bin/env bash
# The prepared GPU check, in under 5 minutes on one H200:
#   1. bench/gpu_check.py: the gallery on hardware, for correctness (aligned, ragged and wide-row
#      shapes, float32 and bfloat16) and speed at the shapes the goals are stated at (against
#      XLA, hand-written Pallas and the copy bandwidth, all measured in the same run);
#   2. the GPU test subset (`pytest -m gpu`), when pytest is installed;
#   3. bench/gpu_compile.py on the device: the gallery's registers, spills and SASS mix as the
#      device's own compile gives them, to compare with the deviceless `make gpu-compile`.
#
#   bash bench/gpu_check.sh              # from the repository root
#   bash bench/gpu_check.sh --dry-run    # the same code paths on the interpreter, no GPU needed
#
# Everything is written under $GPU_CHECK_OUT (default: the current directory): gpu_check.json,
# gpu_check.md, and the logs. It needs only Python with jax, jaxlib (and the jax CUDA plugin),
# jaxtyping, beartype and numpy; it installs nothing and uses no network. statickernel is taken
# from src/ when it is not installed. Exit status: 0 all passed, 1 a check failed, 2 no GPU.
set -uo pipefail

OUT="${GPU_CHECK_OUT:-$PWD}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export GPU_CHECK_OUT="$OUT"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$REPO/src"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"

# Hard limits, so the whole script stays inside its 5 minutes even if a compile hangs: the
# Python check skips what is left past its own budget, and `timeout` backs that up
# (GPU_CHECK_LIMIT_S lifts it for a dry run on a loaded machine, as the toolchain tests do).
CHECK_LIMIT_S=${GPU_CHECK_LIMIT_S:-195}
TESTS_LIMIT_S=75
COMPILE_LIMIT_S=45

dry_run=0
for arg in "$@"; do
  [ "$arg" = "--dry-run" ] && dry_run=1
done
suffix=""
[ "$dry_run" = 1 ] && suffix="-dry-run"

echo "==> gpu_check: $("$PYTHON" --version 2>&1), writing under $OUT"
timeout "$CHECK_LIMIT_S" "$PYTHON" bench/gpu_check.py "$@" 2>&1 | tee "$OUT/gpu_check$suffix.log"
check_rc=${PIPESTATUS[0]}
if [ "$check_rc" = 2 ]; then
  exit 2 # no CUDA device: gpu_check.py said why
fi
if [ "$check_rc" = 124 ]; then
  echo "gpu_check: stopped after ${CHECK_LIMIT_S} s; the results so far are in $OUT" >&2
fi

tests_rc=0
if "$PYTHON" -c "import pytest" 2>/dev/null; then
  echo "==> the GPU test subset (pytest -m gpu)"
  timeout "$TESTS_LIMIT_S" "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 |
    tee "$OUT/gpu_tests$suffix.log"
  tests_rc=${PIPESTATUS[0]}
  if [ "$tests_rc" = 5 ]; then # pytest: no test is marked gpu
    echo "(no tests are marked gpu)"
    tests_rc=0
  fi
else
  echo "==> pytest is not installed: skipping the GPU test subset"
fi

# The gallery compiled on the device itself, as `make gpu-compile` does without one: the same
# rows, so that bench/results/gpu-compile.json (deviceless) can be compared with the device's
# own compile (same ptxas version: both files say which), with each row's PTX, SASS and ptxas
# log under gpu_compile_device/. Rows fail with a ToolchainError when no ptxas is found.
if [ "$dry_run" = 0 ]; then
  echo "==> the gallery compiled on the device (registers, spills, occupancy, SASS mix)"
  timeout "$COMPILE_LIMIT_S" "$PYTHON" bench/gpu_compile.py \
    --out "$OUT/gpu_compile_device.json" --markdown "$OUT/gpu_compile_device.md" \
    --dump "$OUT/gpu_compile_device" 2>&1 |
    tee "$OUT/gpu_compile_device.log"
fi

echo "==> results in $OUT:"
ls -l "$OUT"/gpu_check$suffix.* "$OUT"/gpu_tests$suffix.log "$OUT"/gpu_compile_device.* 2>/dev/null
if [ "$check_rc" != 0 ] || [ "$tests_rc" != 0 ]; then
  exit 1
fi
exit 0

"""Compiling for the GPU without one: the report's facts, occupancy, errors, and budgets.

Most of this file reads saved compiler output (tests/aot/data/) and runs anywhere. The
tests marked `toolchain` compile for real through the CUDA plugin and ptxas; they skip in an
environment without them and run in .venv-aot (`make gpu-compile`, which CI runs). There the
gallery's register and spill budgets (tests/aot/compile-budgets.json) are checked against
the one pinned ptxas version they were measured with.
"""

import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import Array, Float32

import statickernel as sk
from gallery_cases import KERNELS, structs
from statickernel.aot.report import (
    KEY_SASS,
    TARGETS,
    CompileReport,
    OccupancyLimit,
    occupancy,
    parse_ptxas,
    parse_smem_scratch,
    parse_threads,
    sass_counts,
)
from statickernel.cli import main

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "aot" / "data"
BUDGETS = REPO / "tests" / "aot" / "compile-budgets.json"
H100 = TARGETS["sm_90a"]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        return False


HAS_TOOLCHAIN = any(_installed(m) for m in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"))
toolchain = pytest.mark.skipif(
    not HAS_TOOLCHAIN, reason="needs the CUDA plugin and ptxas (make gpu-compile)"
)
no_toolchain = pytest.mark.skipif(HAS_TOOLCHAIN, reason="the toolchain is installed here")

SOFTMAX_PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_softmax_block_mosaic_gpu_kernel' for 'sm_90a'
ptxas info    : Function properties for _softmax_block_mosaic_gpu_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 117 registers, used 2 barriers, 1 bytes smem
ptxas info    : Compile time = 27.373 ms
"""
SPILLING_PTXAS = """\
ptxas info    : Function properties for _k_block_mosaic_gpu_kernel
    144 bytes stack frame, 140 bytes spill stores, 136 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1 bytes smem
"""


def softmax_kernel() -> sk.Kernel[..., Any]:
    return KERNELS["softmax"]


# --- reading the compiler's output -------------------------------------------------------------


def test_ptxas_log_facts() -> None:
    facts = parse_ptxas(SOFTMAX_PTXAS)
    assert (facts.registers, facts.spill_store_bytes, facts.spill_load_bytes) == (117, 0, 0)
    assert facts.static_smem_bytes == 1
    spilling = parse_ptxas(SPILLING_PTXAS)
    assert (spilling.registers, spilling.spill_store_bytes, spilling.spill_load_bytes) == (
        255,
        140,
        136,
    )
    assert spilling.stack_bytes == 144


def test_ptxas_log_with_info_lines_from_a_real_matmul() -> None:
    facts = parse_ptxas((DATA / "matmul.ptxas").read_text())
    assert (facts.registers, facts.spill_store_bytes) == (154, 0)


def test_a_log_without_registers_is_refused() -> None:
    with pytest.raises(ValueError, match="Used N registers"):
        parse_ptxas("ptxas info    : 0 bytes gmem\n")


def test_resources_and_threads() -> None:
    assert parse_smem_scratch((DATA / "matmul.resources.txt").read_text()) == 131072
    assert parse_smem_scratch("Resources()") is None
    assert parse_threads((DATA / "matmul_head.ptx").read_text()) == 128
    assert parse_threads(".entry k()\n.reqntid 128, 3, 1\n{") == 384
    assert parse_threads(".entry k()\n{") is None


def test_sass_mix_of_a_real_listing() -> None:
    counts = sass_counts((DATA / "matmul_excerpt.sass").read_text())
    # Counted by hand in the excerpt; predicated instructions (@UP0 UTMALDG) count too.
    assert {op: counts.get(op, 0) for op in ("HGMMA", "UTMALDG", "UTMASTG", "STS", "BAR")} == {
        "HGMMA": 3,
        "UTMALDG": 3,
        "UTMASTG": 1,
        "STS": 3,
        "BAR": 3,
    }
    assert counts.get("USETMAXREG", 0) == 0
    assert "HGMMA.64x128x16" not in counts  # modifiers are not part of the opcode
    assert "UTMALDG.MULTICAST" not in counts


def test_multicast_copies_are_counted_among_the_tma_loads() -> None:
    sass = (
        "        /*0750*/                   UTMALDG.4D [UR8], [UR4] ;\n"
        "        /*0760*/              @UP0 UTMALDG.4D.MULTICAST [UR16], [UR12], UR10 ;\n"
        "        /*0770*/                   UTMALDG.2D.MULTICAST [UR16], [UR12], UR10 ;\n"
    )
    counts = sass_counts(sass)
    assert counts["UTMALDG"] == 3 and counts["UTMALDG.MULTICAST"] == 2


# --- occupancy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("registers", "smem", "threads", "ctas", "limit"),
    [
        # 117 registers: 15 units of 256 per warp, 17 warps fit, 4 CTAs of 4 warps; 55 KiB
        # of shared memory (+1 KiB reserved) also fits 4.
        (117, 55297, 128, 4, OccupancyLimit.REGISTERS),
        (154, 131073, 128, 1, OccupancyLimit.SHARED_MEMORY),
        (32, 0, 128, 16, OccupancyLimit.REGISTERS),  # registers and threads both allow 16
        (16, 0, 1024, 2, OccupancyLimit.THREADS),
        (16, 0, 32, 32, OccupancyLimit.CTA_SLOTS),
        (168, 65537, 384, 1, OccupancyLimit.REGISTERS),
    ],
)
def test_occupancy(registers: int, smem: int, threads: int, ctas: int, limit: Any) -> None:
    result = occupancy(H100, registers, smem, threads)
    assert (result.ctas_per_sm, result.limited_by) == (ctas, limit)
    assert f"limited by {limit.value}" in str(result)


def test_targets_ship_their_description() -> None:
    for target in TARGETS.values():
        target.check_invariants()
        path = REPO / "src" / "statickernel" / "targets" / target.description_file
        text = path.read_text()
        assert f"core_count: {target.sms}\n" in text
        assert f"major: {target.compute_capability[0]}\n" in text


def _report() -> CompileReport:
    return CompileReport(
        kernel="softmax",
        target="sm_90a",
        gpu=H100.gpus,
        compiled_on="deviceless",
        shapes=("float32[1000,100]",),
        registers=117,
        spill_store_bytes=0,
        spill_load_bytes=0,
        smem_bytes=55297,
        threads=128,
        occupancy=occupancy(H100, 117, 55297, 128),
        sass_mix=tuple((op, 1 if op == "UTMALDG" else 0) for op in KEY_SASS),
        ptxas_version="13.5, V13.5.37",
        ptx=".version 9.0",
        sass="UTMALDG",
        ptxas_log=SOFTMAX_PTXAS,
    )


def test_report_shows_as_its_text_in_a_notebook() -> None:
    report = _report()
    shown = report._repr_html_()
    assert shown.startswith("<pre") and "117 per thread" in shown
    parts: list[str] = []
    report._repr_pretty_(type("Printer", (), {"text": lambda self, t: parts.append(t)})(), False)
    assert parts == [str(report)]


def test_report_summary_and_json() -> None:
    report = _report()
    report.check_invariants()
    text = str(report)
    for expected in ("117 per thread", "spills:         none", "55,297 B", "1 warpgroup"):
        assert expected in text
    assert "4 CTAs/SM, limited by registers" in text
    facts = report.to_json()
    assert {
        "kernel",
        "shape",
        "registers",
        "spill_bytes",
        "smem_bytes",
        "ctas_per_sm",
        "sass",
    } <= set(facts)
    assert facts["sass"]["UTMALDG"] == 1 and facts["spill_bytes"] == 0
    json.dumps(facts)
    spilled = dataclasses.replace(report, spill_store_bytes=8, spill_load_bytes=8)
    assert spilled.spill_bytes == 8 and "8 B stored, 8 B loaded" in str(spilled)


# --- errors before any compile ----------------------------------------------------------------


def test_an_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(sk.CompileTargetError) as info:
        softmax_kernel().compile(*structs("softmax"), target="sm_80")
    assert "'sm_90a' or 'sm_100a'" in str(info.value)
    assert info.value.where and "test_compile.py" in info.value.where


def test_code_generated_for_one_target_is_not_compiled_for_another() -> None:
    blackwell = KERNELS["matmul"].with_target("sm_100a")
    with pytest.raises(sk.CompileError, match="bound to generate code for sm_100a") as info:
        blackwell.compile(*structs("matmul"), target="sm_90a")
    assert info.value.expected == "target='sm_100a', the kernel's"


@no_toolchain
def test_a_missing_toolchain_says_what_to_install() -> None:
    with pytest.raises(sk.ToolchainError) as info:
        softmax_kernel().compile(*structs("softmax"))
    assert "'.[aot]'" in str(info.value.fix)


@no_toolchain
def test_the_command_line_reports_a_missing_toolchain(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", "examples/softmax.py:softmax", "--arg", "x=float32[1000,100]"])
    assert code == 1
    err = capsys.readouterr().err
    assert "ToolchainError" not in err and "'.[aot]'" in err


@no_toolchain
def test_check_and_plan_with_compile_report_a_missing_toolchain(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", "examples/softmax.py", "--compile"]) == 1
    out = capsys.readouterr().out
    assert "✗" in out and "compiling failed" in out and "'.[aot]'" in out
    plan = ["plan", "examples/softmax.py:softmax", "--arg", "x=float32[100,100]", "--compile"]
    assert main(plan) == 1
    captured = capsys.readouterr()
    assert "grid" in captured.out and "'.[aot]'" in captured.err


# --- with the toolchain -------------------------------------------------------------------------


@toolchain
def test_plan_with_compile_prints_both(capsys: pytest.CaptureFixture[str]) -> None:
    plan = ["plan", "examples/softmax.py:softmax", "--arg", "x=float32[100,100]", "--compile"]
    assert main(plan) == 0
    out = capsys.readouterr().out
    assert out.index("grid") < out.index("CompileReport for `softmax` on sm_90a")


@toolchain
def test_compile_a_row_kernel() -> None:
    report = softmax_kernel().compile(jax.ShapeDtypeStruct((1000, 100), jnp.float32))
    report.check_invariants()
    assert report.compiled_on in ("deviceless", *(d.device_kind for d in jax.devices()))
    assert report.spill_bytes == 0 and 0 < report.registers <= 255
    mix = dict(report.sass_mix)
    assert mix["UTMALDG"] >= 1 and mix["HGMMA"] == 0
    assert ".target sm_90a" in report.ptx.replace("\t", " ")
    assert (
        report.smem_bytes
        >= softmax_kernel().plan(jax.ShapeDtypeStruct((1000, 100), jnp.float32)).smem_bytes - 1024
    )
    again = softmax_kernel().compile(jax.ShapeDtypeStruct((1000, 100), jnp.float32))
    assert again is report  # one compile per specialization and target


@toolchain
def test_a_float_remainder_compiles_without_spills() -> None:
    # Exact from the operands' bits (lower/remainder.py): integer ops and a 37-step loop, not
    # unrolled. Seen: 255 registers, 0 B spilled, 2 CTAs/SM at 4096x4096 float32.
    @sk.kernel(tile={"M": "BM"})
    def fmod(
        x: Float32[Array, "M N"], y: Float32[Array, "M N"], *, BM: sk.Const[int] = 64
    ) -> Float32[Array, "M N"]:
        return jax.lax.rem(sk.load(x), sk.load(y))

    square = jax.ShapeDtypeStruct((4096, 4096), jnp.float32)
    report = fmod.compile(square, square)
    assert report.spill_bytes == 0 and report.ctas_per_sm >= 2


def _softmax2(approx_math: bool) -> sk.Kernel:
    @sk.kernel(tile={"M": "BM"}, approx_math=approx_math, name=f"softmax2_{approx_math}")
    def softmax2(x: Float32[Array, "M N"], *, BM: sk.Const[int] = 64) -> Float32[Array, "M N"]:
        v = sk.load(x)
        e = jnp.exp2(v - jnp.max(v, axis=1, keepdims=True))
        return e / jnp.sum(e, axis=1, keepdims=True)

    return softmax2


@toolchain
def test_approximate_math_drops_exp2s_range_handling() -> None:
    """With approx_math=True an exp2 is one MUFU.EX2 (ex2.approx.ftz); exactly, each also
    takes a range check (FSETP) and the multiplies that scale a subnormal result."""
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
    exact, approx = (_softmax2(a).compile(x) for a in (False, True))
    for report in (exact, approx):
        assert report.spill_bytes == 0
    exact_counts, approx_counts = sass_counts(exact.sass), sass_counts(approx.sass)
    assert approx_counts.get("MUFU.EX2", approx_counts.get("MUFU", 0)) > 0
    assert approx_counts.get("FSETP", 0) < exact_counts.get("FSETP", 0)
    assert sum(approx_counts.values()) < sum(exact_counts.values())


def _statickernel(*args: str) -> subprocess.CompletedProcess[str]:
    """The command line in a fresh process (one GPU architecture per process)."""
    return subprocess.run(
        [sys.executable, "-m", "statickernel", *args],
        cwd=REPO,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )


@toolchain
def test_compile_for_blackwell_without_wgmma() -> None:
    done = _statickernel(
        "compile",
        "examples/softmax.py:softmax",
        "--arg",
        "x=float32[100,100]",
        "--target",
        "sm_100a",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["target"] == "sm_100a"


@toolchain
def test_one_architecture_per_process() -> None:
    softmax_kernel().compile(*structs("softmax"))
    with pytest.raises(sk.CompileError, match="one GPU architecture per process") as info:
        KERNELS["row_sum"].compile(*structs("row_sum"), target="sm_100a")
    assert "--target sm_100a" in str(info.value.fix)


@toolchain
def test_a_matmul_uses_the_tensor_cores() -> None:
    report = KERNELS["matmul"].compile(*structs("matmul"))
    assert dict(report.sass_mix)["HGMMA"] > 0


_MATMUL_4096 = (jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16),) * 2


@toolchain
def test_the_matmul_is_warp_specialized_on_its_sass() -> None:
    """At 4096^3 bf16: WGMMA and register reallocation in the SASS, a producer and two
    consumers, a persistent grid of at most 2 x 132 CTAs, and no spills."""
    report = KERNELS["matmul"].compile(*_MATMUL_4096)
    mix = dict(report.sass_mix)
    assert mix["HGMMA"] > 0 and mix["USETMAXREG"] >= 2, str(report)
    assert report.threads == 384
    assert report.spill_store_bytes == report.spill_load_bytes == 0
    assert report.schedule is not None and report.schedule.ctas <= 2 * 132


# A plain bulk store (`cp.async.bulk.global.shared::cta`, no `.tensor`): Mosaic GPU issues
# one for a contiguous slice, clamped only at the end of the whole array.
_PLAIN_STORE = re.compile(r"cp\.async\.bulk\.global\.shared::cta")
_TENSOR_STORE = re.compile(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta")


@toolchain
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_a_matmul_one_epilogue_slot_wide_stores_by_tma_tensor_copies(dtype: Any) -> None:
    """A result of 32 float32 (64 bfloat16) columns is written two slots wide: its pieces
    are strided, so each is a TMA tensor store, which clips at the array's columns."""
    cols = 32 if dtype == jnp.float32 else 64
    a = jax.ShapeDtypeStruct((300, 200), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((200, cols), jnp.bfloat16)
    report = KERNELS["matmul"].compile(a, b, bf16_out=dtype == jnp.bfloat16)
    assert not _PLAIN_STORE.search(report.ptx)
    assert _TENSOR_STORE.search(report.ptx)


def _plain_store_bytes(ptx: str) -> set[int]:
    """The byte counts of the plain bulk stores: each a constant moved into its size
    register, or the most a size clipped at the array's end can be (`min` with a constant,
    where the store's start is traced)."""
    registers = re.findall(
        r"cp\.async\.bulk\.global\.shared::cta\.bulk_group \[[^]]*\], \[[^]]*\], (%r\d+);", ptx
    )
    sizes = set()
    for register in registers:
        moved = re.search(rf"mov\.b32\s+{re.escape(register)}, (\d+);", ptx)
        if moved is None:
            wide = re.search(rf"cvt\.u32\.u64\s+{re.escape(register)}, (%rd\d+);", ptx)
            assert wide is not None, register
            moved = re.search(rf"min\.u64\s+{re.escape(wide.group(1))}, %rd\d+, (\d+);", ptx)
        assert moved is not None, register
        sizes.add(int(moved.group(1)))
    return sizes


@toolchain
def test_a_batch_entrys_last_block_stores_its_rows_alone() -> None:
    """attention at Sq = 100 in blocks of 64 rows: its output's blocks are whole rows of a
    head, stored by plain bulk copies; the last block's copy moves its 36 rows alone (36 x 64
    bfloat16), never the 64 that would reach into the next head's rows."""
    report = KERNELS["attention"].compile(*structs("attention"))
    assert _plain_store_bytes(report.ptx) == {64 * 64 * 2, 36 * 64 * 2}


@toolchain
def test_a_ragged_item_stores_single_rows_only_inside_the_padded_columns() -> None:
    """The grouped matmul's one-row stores are plain bulk copies: its result's columns are
    padded to whole 128-byte slots (260 -> 288 float32), so no row runs into the next."""
    structs_ = structs("grouped_matmul")
    plan = KERNELS["grouped_matmul"].plan(*structs_)
    assert plan.results[0].gmem_shape == (300, 288)
    report = KERNELS["grouped_matmul"].compile(*structs_)
    assert _PLAIN_STORE.search(report.ptx) and _TENSOR_STORE.search(report.ptx)
    assert report.spill_store_bytes == report.spill_load_bytes == 0


@toolchain
@pytest.mark.parametrize(("name", "opcode"), [("matmul_fp8", "QGMMA"), ("matmul_int8", "IGMMA")])
def test_one_byte_products_take_their_tensor_core_instructions(name: str, opcode: str) -> None:
    report = KERNELS[name].compile(*structs(name))
    mix = dict(report.sass_mix)
    assert mix[opcode] > 0 and mix["HGMMA"] == 0 and mix["USETMAXREG"] >= 2, str(report)


@toolchain
def test_the_matmul_has_the_structure_of_jax_own_hopper_matmul() -> None:
    """jax's hopper_matmul_mgpu at the configuration statickernel's matmul chooses (128x128
    a consumer, two consumers along N, BK=64, 4 stages, a bfloat16 result): the same
    registers, shared memory and SASS mix of tensor-core, TMA, stmatrix and setmaxnreg."""
    pytest.importorskip("absl")
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hmm

    from statickernel.aot.compile import _compile

    ours = KERNELS["matmul"].compile(*_MATMUL_4096, bf16_out=True)
    hmm.get_num_sms = lambda: 132  # an H100/H200; a deviceless compile has no device to ask
    config = hmm.TuningConfig(
        tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=4, grid_tile_width=8
    )
    fn = jax.jit(lambda a, b: hmm.matmul(a, b, None, config))
    theirs = _compile(fn, _MATMUL_4096, "hopper_matmul_mgpu", "sm_90a", 0, None)
    keys = ("HGMMA", "UTMALDG", "UTMASTG", "STSM", "USETMAXREG")
    assert [dict(ours.sass_mix)[k] for k in keys] == [dict(theirs.sass_mix)[k] for k in keys]
    assert (ours.registers, ours.smem_bytes) == (theirs.registers, theirs.smem_bytes)


def _product_loop_lengths(sass: str) -> list[int]:
    """The instructions of each loop of the SASS listing that issues tensor-core products
    (HGMMA), shortest first: a loop is a branch back to a label above it."""
    labels: dict[str, int] = {}
    instructions: list[str] = []
    for line in sass.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        op = re.search(r"/\*[0-9a-f]{4}\*/\s+(\S.*)$", line)
        if op:
            instructions.append(op.group(1))
    lengths = []
    for i, instruction in enumerate(instructions):
        target = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", instruction)
        start = labels.get(target.group(1), i + 1) if target else i + 1
        if start <= i and any("HGMMA" in x for x in instructions[start : i + 1]):
            lengths.append(i + 1 - start)
    return sorted(lengths)


@toolchain
def test_the_attention_forward_has_the_structure_of_jax_own_attention() -> None:
    """At 1x16x4096x128, as jax's attention_mgpu (a producer and two consumers of 64 query
    rows sharing each block of 64 keys, 2 stages): 384 threads, setmaxnreg, one CTA an SM,
    no spills, and no more instructions a block of keys than it."""
    pytest.importorskip("absl")
    from jax.experimental.pallas.ops.gpu import attention_mgpu

    from statickernel.aot.compile import _compile

    shape = jax.ShapeDtypeStruct((1, 16, 4096, 128), jnp.bfloat16)
    ours = KERNELS["attention"].compile(shape, shape, shape)
    config = attention_mgpu.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
    fn = jax.jit(lambda q, k, v: attention_mgpu.attention(q, k, v, config))
    heads_inside = (jax.ShapeDtypeStruct((1, 4096, 16, 128), jnp.float16),) * 3
    theirs = _compile(fn, heads_inside, "attention_mgpu", "sm_90a", 0, None)
    assert ours.schedule is not None and ours.schedule.threads == 384
    assert ours.schedule.ctas_per_sm == 1
    assert dict(ours.sass_mix)["USETMAXREG"] >= 2 and ours.spill_store_bytes == 0
    assert ours.registers == theirs.registers
    ours_loop, theirs_loop = _product_loop_lengths(ours.sass), _product_loop_lengths(theirs.sass)
    assert ours_loop and theirs_loop and ours_loop[0] <= theirs_loop[0], (ours_loop, theirs_loop)


@toolchain
@pytest.mark.parametrize("name", ["attention", "mlp"])
def test_a_product_of_a_value_reads_it_from_registers(name: str) -> None:
    """The device form of `sk.dot(p, v)`: one HGMMA whose `a` is registers (R<n>), not a shared
    memory descriptor (gdesc), as the interpreter's staged form would be."""
    report = KERNELS[name].compile(*structs(name))
    hgmma = [line for line in report.sass.splitlines() if "HGMMA." in line]
    from_registers = re.compile(r"HGMMA\.\S+ R\d+, R\d+, gdesc")
    assert hgmma and report.sass, "no SASS listing"
    assert any(from_registers.search(line) for line in hgmma), "\n".join(hgmma[:8])


@toolchain
def test_the_command_line_prints_json_last(tmp_path: pathlib.Path) -> None:
    done = _statickernel(
        "compile",
        "examples/softmax.py:softmax",
        "--arg",
        "x=float32[100,100]",
        "--json",
        "--dump",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["kernel"] == "softmax" and facts["spill_bytes"] == 0
    assert {p.suffix for p in tmp_path.iterdir()} == {".ptx", ".sass", ".ptxas", ".json"}


def _budgets() -> dict[str, Any]:
    return json.loads(BUDGETS.read_text())


def _compiled_within_budget(
    kernel: str, args: Any, table: str, case: str, **consts: Any
) -> sk.CompileReport:
    """The gallery kernel compiled with the pinned ptxas (skipped with another), with no
    spills and registers within its budget, `table`'s entry for `case`."""
    budgets = _budgets()
    report = KERNELS[kernel].compile(*args, target=budgets["target"], **consts)
    pinned = budgets["ptxas"]
    if not report.ptxas_version.startswith(pinned):
        pytest.skip(f"the budgets hold for ptxas {pinned}; this is ptxas {report.ptxas_version}")
    budget = budgets[table][case]
    measured = f"{case}: {report.registers} registers, {report.spill_bytes} B spilled"
    assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, f"spills: {measured}"
    assert report.registers <= budget, f"over its budget of {budget} registers: {measured}"
    return report


@toolchain
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_gallery_register_budget(name: str) -> None:
    """Registers within the budget and no spills, at the golden file's shape, with the pinned
    ptxas. A kernel under budget passes; lower its budget in the file to keep the gain."""
    _compiled_within_budget(name, structs(name), "registers", name)


def test_budgets_cover_the_gallery() -> None:
    assert set(_budgets()["registers"]) == set(KERNELS)


# --- the GPU check's shapes: no spills, and loads in flight ------------------------------------

_S = jax.ShapeDtypeStruct
_F32, _BF16 = jnp.float32, jnp.bfloat16
# The memory-bound kernels at the shapes an H200 run times them at.
H200_SHAPES: dict[str, tuple[str, tuple[jax.ShapeDtypeStruct, ...]]] = {
    "add 8192x8192 f32": ("add", (_S((8192, 8192), _F32), _S((8192, 8192), _F32))),
    "softmax 16384x1024 f32": ("softmax", (_S((16384, 1024), _F32),)),
    "softmax 16384x8192 f32": ("softmax", (_S((16384, 8192), _F32),)),
    "rmsnorm 16384x4096 bf16": ("rmsnorm", (_S((16384, 4096), _BF16), _S((4096,), _BF16))),
    "layernorm 16384x1024 f32": (
        "layernorm",
        (_S((16384, 1024), _F32), _S((1024,), _F32), _S((1024,), _F32)),
    ),
    "row_sum 16384x1024 f32": ("row_sum", (_S((16384, 1024), _F32),)),
    "softmax_backward 16384x4096 f32": (
        "softmax_backward",
        (_S((16384, 4096), _F32), _S((16384, 4096), _F32)),
    ),
    "rmsnorm_backward 16384x4096 bf16": (
        "rmsnorm_backward",
        (_S((16384, 4096), _BF16), _S((4096,), _BF16), _S((16384, 4096), _BF16)),
    ),
    "layernorm_backward 16384x4096 bf16": (
        "layernorm_backward",
        (_S((16384, 4096), _BF16), _S((4096,), _BF16), _S((16384, 4096), _BF16)),
    ),
    "rmsnorm_backward_saved 16384x4096 bf16": (
        "rmsnorm_backward_saved",
        (
            _S((16384, 4096), _BF16),
            _S((4096,), _BF16),
            _S((16384, 4096), _BF16),
            _S((16384,), _F32),
        ),
    ),
    "layernorm_backward_saved 16384x4096 bf16": (
        "layernorm_backward_saved",
        (
            _S((16384, 4096), _BF16),
            _S((4096,), _BF16),
            _S((16384, 4096), _BF16),
            _S((16384,), _F32),
            _S((16384,), _F32),
        ),
    ),
    "rmsnorm_backward_rows 16384x4096 bf16": (
        "rmsnorm_backward_rows",
        (_S((16384, 4096), _BF16), _S((4096,), _BF16), _S((16384, 4096), _BF16)),
    ),
    "rmsnorm_backward_weight 16384x4096 bf16": (
        "rmsnorm_backward_weight",
        (_S((16384, 4096), _BF16), _S((16384, 4096), _BF16), _S((16384,), _F32)),
    ),
    "cross_entropy 16384x32000 bf16": (
        "cross_entropy",
        (_S((16384, 32000), _BF16), _S((16384,), jnp.dtype(jnp.int32))),
    ),
    "cross_entropy_backward 16384x32000 bf16": (
        "cross_entropy_backward",
        (_S((16384, 32000), _BF16), _S((16384,), jnp.dtype(jnp.int32)), _S((), _F32)),
    ),
    "layernorm_backward_params 16384x4096 bf16": (
        "layernorm_backward_params",
        (
            _S((16384, 4096), _BF16),
            _S((16384, 4096), _BF16),
            _S((16384,), _F32),
            _S((16384,), _F32),
        ),
    ),
}


# Decode steps' products, whose loop over K the plan splits across CTAs with the declared
# blocks (passed, as the plan narrows them otherwise): (kernel, operands, constants, the
# CTAs the split launches).
SPLIT_SHAPES: dict[str, tuple[str, tuple[jax.ShapeDtypeStruct, ...], dict[str, Any], int]] = {
    "matmul 16x4096x4096 bf16": (
        "matmul",
        (_S((16, 4096), _BF16), _S((4096, 4096), _BF16)),
        {"bf16_out": True, "BM": 128, "BN": 128},
        128,
    ),
    "matmul_w4a16 16x4096x4096": (
        "matmul_w4a16",
        (_S((4096, 4096), jnp.int4), _S((32, 4096), _BF16), _S((16, 4096), _BF16)),
        {"BM": 64},
        128,
    ),
    "matmul_w8a16 16x4096x4096": (
        "matmul_w8a16",
        (_S((4096, 4096), jnp.int8), _S((4096,), _F32), _S((16, 4096), _BF16)),
        {"BM": 64},
        128,
    ),
}

# Decode steps' products with the blocks the plan narrows them to (64 x 32, the 64-byte
# swizzle), one a CTA: matmul at M = 1, 16 and 64 against a 4096 x 4096 weight.
NARROWED_SHAPES: dict[str, tuple[jax.ShapeDtypeStruct, ...]] = {
    f"matmul {m}x4096x4096 bf16": (_S((m, 4096), _BF16), _S((4096, 4096), _BF16))
    for m in (1, 16, 64)
}


def test_split_budgets_cover_the_shapes() -> None:
    assert set(_budgets()["split_registers"]) == set(SPLIT_SHAPES)


@toolchain
@pytest.mark.parametrize("case", list(SPLIT_SHAPES))
def test_split_products_at_decode_shapes(case: str) -> None:
    """A decode step's product split across CTAs: no spills, registers within budget, and a
    CTA for every block and part, as the plan says."""
    name, args, consts, ctas = SPLIT_SHAPES[case]
    report = _compiled_within_budget(name, args, "split_registers", case, **consts)
    assert report.schedule is not None
    assert report.schedule.kind is sk.ScheduleKind.SPLIT_LOOP
    assert report.schedule.ctas == ctas


def test_narrowed_budgets_cover_the_shapes() -> None:
    assert set(_budgets()["narrowed_registers"]) == set(NARROWED_SHAPES)


@toolchain
@pytest.mark.parametrize("case", list(NARROWED_SHAPES))
def test_narrowed_products_at_decode_shapes(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode step's product in narrowed blocks: no spills, registers within budget, at
    least 128 CTAs with no split, WGMMA on the 64-byte swizzle, and the weight read once."""
    monkeypatch.setenv("STATICKERNEL_AUTOTUNE", "0")  # the defaults, not a cached tuning
    args = NARROWED_SHAPES[case]
    report = _compiled_within_budget("matmul", args, "narrowed_registers", case)
    assert report.schedule is not None and report.schedule.ctas >= 128
    assert report.schedule.kind is sk.ScheduleKind.PIPELINED_LOOPS
    assert dict(report.sass_mix).get("HGMMA", 0) > 0
    plan = KERNELS["matmul"].plan(*args)
    assert plan.narrowing is not None and plan.split is None
    assert plan.operand("b").swizzle == 32  # 32 bfloat16 columns: 64 bytes
    assert plan.cost is not None and plan.cost.hbm_bytes <= 1.1 * 4096 * 4096 * 2


# The widest rows: up to 16384 columns held whole in registers, past that computed in passes
# over chunks of 8192 (tests/compiler/mosaic_gpu/forms/test_row_chunks.py): (kernel, operands, chunks).
WIDE_SHAPES: dict[str, tuple[str, tuple[jax.ShapeDtypeStruct, ...], int]] = {
    "softmax 4096x32768 bf16": ("softmax", (_S((4096, 32768), _BF16),), 4),
    "rmsnorm 4096x32768 bf16": (
        "rmsnorm",
        (_S((4096, 32768), _BF16), _S((32768,), _BF16)),
        4,
    ),
    "layernorm 4096x32768 bf16": (
        "layernorm",
        (_S((4096, 32768), _BF16), _S((32768,), _BF16), _S((32768,), _BF16)),
        4,
    ),
    "softmax 4096x32768 f32": ("softmax", (_S((4096, 32768), _F32),), 4),
    # A vocabulary's width: padded to 32768, each chunk masked past the edge.
    "softmax 4096x32000 bf16": ("softmax", (_S((4096, 32000), _BF16),), 4),
    "softmax 4096x16384 f32": ("softmax", (_S((4096, 16384), _F32),), 1),
    "rmsnorm 4096x16384 f32": ("rmsnorm", (_S((4096, 16384), _F32), _S((16384,), _F32)), 1),
    "layernorm 4096x16384 f32": (
        "layernorm",
        (_S((4096, 16384), _F32), _S((16384,), _F32), _S((16384,), _F32)),
        1,
    ),
    # A scan of each whole row in a buffer of its own beside the row (not chunked: a scan
    # needs the row whole), with the logits and probabilities live across it.
    "top_p_mask 4096x8192 f32": ("top_p_mask", (_S((4096, 8192), _F32),), 1),
    "top_p_mask 1024x16384 bf16": ("top_p_mask", (_S((1024, 16384), _BF16),), 1),
}


def test_wide_budgets_cover_the_shapes() -> None:
    assert set(_budgets()["wide_registers"]) == set(WIDE_SHAPES)


@toolchain
@pytest.mark.parametrize("case", list(WIDE_SHAPES))
def test_the_widest_rows_compile_without_spills(case: str) -> None:
    """Softmax and the norms at the widest rows a block holds: no spills, registers within
    budget, the row in the chunks the plan says."""
    name, args, chunks = WIDE_SHAPES[case]
    report = _compiled_within_budget(name, args, "wide_registers", case)
    plan = KERNELS[name].plan(*args)
    assert plan.row_frame is not None and plan.row_frame.chunks == chunks, str(report)


# Rows whose bytes are not a multiple of 16, addressed flat with no host padding
# (tests/compiler/mosaic_gpu/emit/test_flat_rows.py): (kernel, operands).
def _row_operands(kernel: str, m: int, n: int, dtype: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
    vectors = {"softmax": 0, "rmsnorm": 1, "layernorm": 2}[kernel]
    return (_S((m, n), dtype), *[_S((n,), dtype)] * vectors)


FLAT_SHAPES: dict[str, tuple[str, tuple[jax.ShapeDtypeStruct, ...]]] = {
    f"{name} {m}x{n} {label}": (name, _row_operands(name, m, n, dtype))
    for name in ("softmax", "rmsnorm", "layernorm")
    for m, n, dtype, label in ((16384, 4095, _F32, "f32"), (16383, 4095, _BF16, "bf16"))
} | {
    "softmax 4096x50257 bf16": ("softmax", (_S((4096, 50257), _BF16),)),
    # A vocabulary of 50257: the loss and its gradient on whole rows, read once.
    "cross_entropy_rows 16384x50257 bf16": (
        "cross_entropy_rows",
        (_S((16384, 50257), _BF16), _S((16384,), jnp.int32)),
    ),
    "cross_entropy_rows_backward 16384x50257 bf16": (
        "cross_entropy_rows_backward",
        (_S((16384, 50257), _BF16), _S((16384,), jnp.int32), _S((), _F32)),
    ),
}


def test_flat_budgets_cover_the_shapes() -> None:
    assert set(_budgets()["flat_registers"]) == set(FLAT_SHAPES)


@toolchain
@pytest.mark.parametrize("case", list(FLAT_SHAPES))
def test_unaligned_rows_compile_to_1d_boxes_without_spills(case: str) -> None:
    """Rows of 4095 columns (and a vocabulary of 50257): 1-D TMA boxes in, register stores
    out, no spills, and the occupancy the aligned width has (shared memory's limit)."""
    name, args = FLAT_SHAPES[case]
    report = _compiled_within_budget(name, args, "flat_registers", case)
    plan = KERNELS[name].plan(*args)
    rows_result = plan.results[0].shape == args[0].shape  # not the loss's scalar
    assert plan.operands[0].flat and (plan.results[0].flat or not rows_result), str(plan)
    counts = dict(report.sass_mix)
    assert counts.get("UTMALDG", 0) > 0 and counts.get("STG", 0) > 0, counts
    assert plan.cost is not None
    once = sum(math.prod(a.shape) * a.dtype.itemsize for a in args) + sum(
        math.prod(r.shape) * jnp.dtype(r.dtype).itemsize for r in plan.results
    )
    assert plan.cost.hbm_bytes <= 1.05 * once, (plan.cost.hbm_bytes, once)
    m, n = args[0].shape
    if n == 4095:
        aligned = KERNELS[name].plan(*_row_operands(name, m, 4096, args[0].dtype))
        assert aligned.schedule is not None
        assert report.ctas_per_sm >= aligned.schedule.ctas_per_sm


# Large products, whose persistent launch runs in clusters of two CTAs that share a block by
# TMA multicast: (kernel, operands, constants).
_FP8 = jnp.float8_e4m3fn
CLUSTER_SHAPES: dict[str, tuple[str, tuple[jax.ShapeDtypeStruct, ...], dict[str, Any]]] = {
    "matmul 8192x8192x8192 bf16": (
        "matmul",
        (_S((8192, 8192), _BF16), _S((8192, 8192), _BF16)),
        {"bf16_out": True},
    ),
    "matmul_fp8 8192x8192x8192": (
        "matmul_fp8",
        (_S((8192, 8192), _FP8), _S((8192, 8192), _FP8), _S((), _F32), _S((), _F32)),
        {},
    ),
    "batched_matmul 4x4096x4096x4096": (
        "batched_matmul",
        (_S((4, 4096, 4096), _BF16), _S((4, 4096, 4096), _BF16)),
        {},
    ),
}


def test_cluster_budgets_cover_the_shapes() -> None:
    assert set(_budgets()["cluster_registers"]) == set(CLUSTER_SHAPES)


@toolchain
@pytest.mark.parametrize("case", list(CLUSTER_SHAPES))
def test_large_products_multicast_in_clusters(case: str) -> None:
    """A large product's clustered launch: multicast copies in the SASS, no spills,
    registers within budget, one CTA an SM."""
    name, args, consts = CLUSTER_SHAPES[case]
    report = _compiled_within_budget(name, args, "cluster_registers", case, **consts)
    mix = dict(report.sass_mix)
    if report.sass:  # the disassembler was found
        assert 0 < mix["UTMALDG.MULTICAST"] < mix["UTMALDG"], str(report)
    assert report.schedule is not None and report.schedule.ctas == 132
    assert report.ctas_per_sm == 1


# Loops over the columns of rows that fit in shared memory: the row form walks them there.
_VECTORS = {"softmax_online": 0, "layernorm_wide": 2}
ROW_LOOP_SHAPES: dict[str, tuple[str, tuple[jax.ShapeDtypeStruct, ...]]] = {
    f"{name} {m}x{n} {label}": (name, (_S((m, n), dtype), *[_S((n,), dtype)] * vectors))
    for name, vectors in _VECTORS.items()
    for m, n, dtype, label in ((16384, 8192, _F32, "f32"), (16383, 4095, _BF16, "bf16"))
}


def test_row_loop_budgets_cover_the_shapes() -> None:
    assert set(_budgets()["row_loop_registers"]) == set(ROW_LOOP_SHAPES)


@toolchain
@pytest.mark.parametrize("case", list(ROW_LOOP_SHAPES))
def test_loops_over_rows_in_shared_memory_read_them_once(case: str) -> None:
    """Both loops walk the row held in shared memory: x read once, a CTA for every SM (or
    two an SM), no spills."""
    name, args = ROW_LOOP_SHAPES[case]
    report = _compiled_within_budget(name, args, "row_loop_registers", case)
    plan = KERNELS[name].plan(*args)
    assert plan.form is sk.Form.ROWS and not plan.loops, str(plan)
    assert plan.cost is not None
    result = math.prod(args[0].shape) * args[0].dtype.itemsize
    once = sum(math.prod(a.shape) * a.dtype.itemsize for a in args) + result
    assert plan.cost.hbm_bytes <= 1.05 * once, (plan.cost.hbm_bytes, once)
    assert report.schedule is not None
    assert report.schedule.ctas >= 132 or report.ctas_per_sm >= 2, str(report)


def test_h200_budgets_cover_the_shapes() -> None:
    assert set(_budgets()["h200_registers"]) == set(H200_SHAPES)


@toolchain
@pytest.mark.parametrize("case", list(H200_SHAPES))
def test_memory_bound_kernels_at_h200_shapes(case: str) -> None:
    """No spills and registers within budget, and with the registers counted, at least
    64 KiB of loads in flight per SM (what keeps HBM busy)."""
    name, args = H200_SHAPES[case]
    report = _compiled_within_budget(name, args, "h200_registers", case)
    assert report.schedule is not None
    report.schedule.check_invariants()
    if report.schedule.limited_by is sk.OccupancyLimit.GRID:  # fewer CTAs than SMs allow
        assert report.schedule.ctas_per_sm <= report.ctas_per_sm
    else:
        assert report.schedule.ctas_per_sm == report.ctas_per_sm
    assert report.schedule.bytes_in_flight_per_sm >= 64 * 1024, str(report.schedule)

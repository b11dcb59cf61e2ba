"""Draws the performance page's charts as SVG from the committed results, with no dependencies.

    python bench/chart.py           # writes docs/assets/compile.svg and docs/assets/cpu-bench.svg
    python bench/chart.py --check   # exit status 1 when a committed chart is out of date

`compile.svg` shows, for each gallery kernel at each shape of bench/results/gpu-compile.json,
the registers per thread that ptxas gave it for sm_90a and the CTAs per SM they leave.
`cpu-bench.svg` shows the ratios of the latest bench/results/cpu-*.json (statickernel over
the hand-written kernel) for the first call and the steady state, against their goals. The
output depends only on the JSON, so a chart can be compared byte for byte.
"""

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
ASSETS = ROOT / "docs" / "assets"

WIDTH = 760
LABEL_W = 230  # the bar labels' column
BAR_H = 16
GAP = 4
FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif\""
# One colour per CTAs-per-SM count (1, 2, 3, 4+), and for a ratio that meets / misses its goal.
CTA_COLOURS = ("#4e79a7", "#59a14f", "#f28e2b", "#b07aa1")
MEETS, MISSES = "#59a14f", "#e15759"


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str  # shown right of the bar
    colour: str


def _num(value: float) -> str:
    """A coordinate: at most one decimal, no trailing zeros, so the output is stable."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _panel(
    title: str,
    bars: Sequence[Bar],
    top: float,
    scale_max: float,
    ticks: Sequence[float],
    goal: float | None = None,
    goal_text: str = "",
) -> tuple[list[str], float]:
    """One horizontal bar chart starting at y=top: its SVG lines and the y below it."""
    plot_x, plot_w = LABEL_W, WIDTH - LABEL_W - 150
    lines = [f'<text x="8" y="{_num(top + 14)}" class="title">{escape(title)}</text>']
    y0 = top + 36
    height = len(bars) * (BAR_H + GAP)

    def x(value: float) -> float:
        return plot_x + plot_w * min(value, scale_max) / scale_max

    for tick in ticks:
        tx = _num(x(tick))
        lines.append(
            f'<line x1="{tx}" y1="{_num(y0 - 2)}" x2="{tx}" y2="{_num(y0 + height)}" class="grid"/>'
        )
        lines.append(
            f'<text x="{tx}" y="{_num(y0 + height + 12)}" class="tick">{_num(tick)}</text>'
        )
    if goal is not None:
        gx = _num(x(goal))
        lines.append(
            f'<line x1="{gx}" y1="{_num(y0 - 6)}" x2="{gx}" y2="{_num(y0 + height)}" class="goal"/>'
        )
        lines.append(
            f'<text x="{_num(x(goal) + 4)}" y="{_num(y0 - 6)}" class="goaltext">'
            f"{escape(goal_text)}</text>"
        )
    for i, bar in enumerate(bars):
        y = y0 + i * (BAR_H + GAP)
        mid = _num(y + BAR_H / 2 + 4)
        lines.append(f'<text x="{plot_x - 6}" y="{mid}" class="label">{escape(bar.label)}</text>')
        lines.append(
            f'<rect x="{plot_x}" y="{_num(y)}" width="{_num(x(bar.value) - plot_x)}" '
            f'height="{BAR_H}" fill="{bar.colour}"><title>{escape(bar.label)}: '
            f"{escape(bar.text)}</title></rect>"
        )
        lines.append(
            f'<text x="{_num(x(bar.value) + 4)}" y="{mid}" class="value">{escape(bar.text)}</text>'
        )
    return lines, y0 + height + 24


def _document(title: str, body: list[str], height: float) -> str:
    style = (
        "<style>"
        "text{fill:#333;font-size:11px}"
        ".title{font-size:13px;font-weight:600}"
        ".label{text-anchor:end}"
        ".tick{text-anchor:middle;fill:#777;font-size:10px}"
        ".grid{stroke:#ddd;stroke-width:1}"
        ".goal{stroke:#333;stroke-width:1.5;stroke-dasharray:4 3}"
        ".goaltext{font-size:10px}"
        ".note{fill:#666;font-size:10px}"
        "</style>"
    )
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{_num(height)}" '
            f'viewBox="0 0 {WIDTH} {_num(height)}" role="img" {FONT}>',
            f"<title>{escape(title)}</title>",
            style,
            f'<rect width="{WIDTH}" height="{_num(height)}" fill="#fff"/>',
            *body,
            "</svg>",
            "",
        ]
    )


def _shape(row: dict[str, Any]) -> str:
    """The first operand's shape, which sets the kernel's size: float32[8192,4096] as 8192×4096."""
    first = row["shape"][0]
    dtype, dims = first.split("[")
    short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(dtype, dtype)
    return f"{dims.rstrip(']').replace(',', '×')} {short}"


def compile_chart(rows: Sequence[dict[str, Any]]) -> str:
    """Registers per thread and CTAs per SM of each compiled (kernel, shape)."""
    compiled = [r for r in rows if r.get("status") == "ok"]
    bars = [
        Bar(
            f"{r['kernel']} {_shape(r)}",
            r["registers"],
            f"{r['registers']} regs, {r['ctas_per_sm']} CTA{'s' if r['ctas_per_sm'] > 1 else ''}/SM"
            + (f", {r['spill_bytes']} B spilled" if r["spill_bytes"] else ""),
            CTA_COLOURS[min(r["ctas_per_sm"], len(CTA_COLOURS)) - 1],
        )
        for r in compiled
    ]
    ptxas = compiled[0]["ptxas_version"].split("V")[-1] if compiled else "?"
    title = f"Registers per thread, compiled for sm_90a without a GPU (ptxas {ptxas})"
    body, y = _panel(title, bars, 0, 256, (0, 64, 128, 192, 255), 255, "255: the limit")
    counts = sorted({min(r["ctas_per_sm"], len(CTA_COLOURS)) for r in compiled})
    legend = [
        f'<rect x="{LABEL_W + i * 90}" y="{_num(y - 6)}" width="10" height="10" '
        f'fill="{CTA_COLOURS[n - 1]}"/><text x="{LABEL_W + i * 90 + 14}" y="{_num(y + 3)}" '
        f'class="note">{n}{"+" if n == len(CTA_COLOURS) else ""} CTA{"s" if n > 1 else ""}/SM</text>'
        for i, n in enumerate(counts)
    ]
    note = (
        f'<text x="8" y="{_num(y + 20)}" class="note">bench/results/gpu-compile.json: '
        f"{len(compiled)} kernel shapes, {sum(r['spill_bytes'] > 0 for r in compiled)} with "
        "spills. Bar colour: CTAs per SM (the plan's schedule with these registers).</text>"
    )
    return _document(title, [*body, *legend, note], y + 32)


def cpu_chart(data: dict[str, Any], source: str) -> str:
    """First-call and steady-state ratios of statickernel to the hand-written kernel."""
    env = data["environment"]

    def bars(section: str, with_shape: bool) -> list[Bar]:
        return [
            Bar(
                f"{r['kernel']} {'×'.join(map(str, r['shape']))}" if with_shape else r["kernel"],
                r["ratio"],
                f"{r['ratio']:.2f}",
                MEETS if r["meets_goal"] else MISSES,
            )
            for r in data[section]
        ]

    first = data["first_call"]
    steady = data["steady_state"]
    body, y = _panel(
        "First call (lower for CUDA, caches empty): statickernel / hand-written",
        bars("first_call", True),
        0,
        2.0,
        (0, 0.5, 1, 1.5, 2),
        first[0]["goal"],
        f"goal {first[0]['goal']}",
    )
    more, y = _panel(
        "Steady state (interpreter, inside jax.jit): statickernel / hand-written",
        bars("steady_state", False),
        y,
        2.0,
        (0, 0.5, 1, 1.5, 2),
        steady[0]["goal"],
        f"goal {steady[0]['goal']}",
    )
    note = (
        f'<text x="8" y="{_num(y)}" class="note">{escape(source)}: jax {env["jax"]}, '
        f"{env['cpu_count']} CPUs, {env['date']}. Green: meets the goal; red: misses it. "
        "CPU only: no GPU figure.</text>"
    )
    title = "CPU benchmark: statickernel against hand-written Pallas"
    return _document(title, [*body, *more, note], y + 12)


def latest_cpu_results() -> pathlib.Path:
    """The newest bench/results/cpu-<date>.json (dates sort as text)."""
    found = sorted(RESULTS.glob("cpu-*.json"))
    if not found:
        raise SystemExit(f"no cpu-*.json under {RESULTS}: run `make bench`")
    return found[-1]


def charts() -> dict[pathlib.Path, str]:
    """Each chart file and the SVG it should hold, from the committed results."""
    compile_rows = json.loads((RESULTS / "gpu-compile.json").read_text())
    cpu = latest_cpu_results()
    return {
        ASSETS / "compile.svg": compile_chart(compile_rows),
        ASSETS / "cpu-bench.svg": cpu_chart(
            json.loads(cpu.read_text()), f"bench/results/{cpu.name}"
        ),
    }


def _shown(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draws the performance charts as SVG.")
    parser.add_argument("--check", action="store_true", help="fail if a chart is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, svg in charts().items():
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != svg:
                stale.append(_shown(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        print(f"wrote {_shown(path)}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python bench/chart.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a tuning found: each candidate with its figures, and the best one.

`str(result)` is the table `kernel.tune` prints, with the chosen constants as a line to
paste into the declaration or a call.
"""

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

from .._display import TextDisplay

__all__ = ["Ranking", "Status", "TuneCandidate", "TuneResult", "constants_text"]


class Ranking(enum.StrEnum):
    """What ranked the candidates, from the most to the least trustworthy."""

    DEVICE = "device"
    """Each candidate checked against the reference and timed on this machine's GPU."""
    COMPILE = "compile"
    """Each candidate compiled for the target without a GPU: no spills first, then the
    plan's estimate with the compiled registers counted in its occupancy."""
    PLAN = "plan"
    """The plan's first-order estimate alone (`statickernel.tuning.model`)."""


class Status(enum.StrEnum):
    """What became of one candidate."""

    RANKED = "ranked"
    PRUNED = "pruned"
    """A statickernel rule refused it before anything ran (shared memory, alignment, ...)."""
    FAILED = "failed"
    """It was planned, but its compile failed or its results differed from the reference."""


@dataclasses.dataclass(frozen=True)
class TuneCandidate:
    """One combination of the tuned constants, and what it gave."""

    constants: Mapping[str, Any]
    status: Status
    reason: str = ""
    """Why it was pruned or failed: the error's class and first line."""
    ctas: int | None = None
    ctas_per_sm: int | None = None
    bytes_in_flight_per_sm: int | None = None
    smem_bytes: int | None = None
    estimated_seconds: float | None = None
    """The plan's estimate (with the compiled registers when compiled)."""
    copied_bytes: int | None = None
    """The bytes all blocks copy into shared memory (`tuning.model.copied_bytes`)."""
    registers: int | None = None
    spill_bytes: int | None = None
    seconds: float | None = None
    """The median measured time on the device."""

    def check_invariants(self) -> None:
        assert (self.status is Status.RANKED) == (not self.reason)
        if self.status is Status.RANKED:
            assert self.estimated_seconds is not None and self.estimated_seconds > 0

    @property
    def rank_key(self) -> tuple[float, ...]:
        """Smaller is better: measured time first where there is one, then no spills, then
        the estimate, then (between equal estimates, as compute-bound ones are) fewer bytes
        copied onto the chip and more loads in flight."""
        assert self.status is Status.RANKED and self.estimated_seconds is not None
        measured = self.seconds if self.seconds is not None else 0.0
        return (
            measured,
            float(self.spill_bytes or 0),
            self.estimated_seconds,
            float(self.copied_bytes or 0),
            -float(self.bytes_in_flight_per_sm or 0),
        )


@dataclasses.dataclass(frozen=True)
class TuneResult(TextDisplay):
    """The outcome of `kernel.tune(...)`: `best` holds the chosen constants, `table` every
    candidate in rank order (ranked ones first, then the pruned and failed ones)."""

    kernel: str
    ranked_by: Ranking
    target: str
    """The GPU the ranking is for: the device's name, or a compile target such as sm_90a."""
    shapes: tuple[str, ...]
    best: Mapping[str, Any]
    table: tuple[TuneCandidate, ...]
    cached: bool = False
    """Whether this result was read from the on-disk cache rather than measured now."""

    def check_invariants(self) -> None:
        ranked = [c for c in self.table if c.status is Status.RANKED]
        assert ranked and dict(ranked[0].constants) == dict(self.best)
        assert [c.rank_key for c in ranked] == sorted(c.rank_key for c in ranked)
        for candidate in self.table:
            candidate.check_invariants()

    def to_json(self) -> dict[str, Any]:
        """The result as JSON data: `best` and every candidate, in rank order."""
        return {
            "kernel": self.kernel,
            "ranked_by": self.ranked_by.value,
            "target": self.target,
            "shapes": list(self.shapes),
            "cached": self.cached,
            "best": dict(self.best),
            "candidates": [{**dataclasses.asdict(c), "status": c.status.value} for c in self.table],
        }

    def __str__(self) -> str:
        how = {
            Ranking.DEVICE: "timed on the device",
            Ranking.COMPILE: "compiled without a GPU (spills, then the plan's estimate)",
            Ranking.PLAN: "the plan's estimate alone (no GPU, no compile toolchain)",
        }[self.ranked_by]
        lines = [
            f"tuned {self.kernel} for {self.target} at {', '.join(self.shapes)}"
            + (" (from the cache)" if self.cached else ""),
            f"ranked by: {self.ranked_by.value}, {how}",
            f"best: {constants_text(self.best)}",
            "",
            _table(self.table),
        ]
        return "\n".join(lines)


def constants_text(constants: Mapping[str, Any]) -> str:
    """Constants as keyword arguments: `BM=128, BN=256`."""
    return ", ".join(f"{k}={v!r}" for k, v in constants.items())


def _table(candidates: tuple[TuneCandidate, ...]) -> str:
    head = ("constants", "time", "estimate", "regs", "spills", "CTAs/SM", "in flight")
    rows = [head] + [_row(c) for c in candidates if c.status is Status.RANKED]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(f"{v:<{w}}" for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += [
        f"{constants_text(c.constants):<{widths[0]}}  {c.status.value}: {c.reason}"
        for c in candidates
        if c.status is not Status.RANKED
    ]
    return "\n".join(lines)


def _row(c: TuneCandidate) -> tuple[str, ...]:
    in_flight = None if c.bytes_in_flight_per_sm is None else c.bytes_in_flight_per_sm // 1024
    return (
        constants_text(c.constants),
        _us(c.seconds),
        _us(c.estimated_seconds),
        _int(c.registers),
        _int(c.spill_bytes, " B"),
        _int(c.ctas_per_sm),
        _int(in_flight, " KiB"),
    )


def _us(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1e6:,.1f} us"


def _int(value: int | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:,}{unit}"

"""Mosaic GPU's profiler, as a launch carries it: where its traces go and how many events a
warpgroup records (`sk.profile`)."""

import dataclasses

__all__ = ["Profile"]


@dataclasses.dataclass(frozen=True)
class Profile:
    """A profiled launch: each warpgroup records up to `space` events (Mosaic GPU's
    `profile_space`), and each call writes a trace into `directory` (`profile_dir`)."""

    directory: str
    space: int

    def check_invariants(self) -> None:
        assert self.directory and self.space >= 1

    def __str__(self) -> str:
        return (
            f"Mosaic GPU profiler, {self.space:,} events a warpgroup, traces into {self.directory}"
        )

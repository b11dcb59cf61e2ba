"""Clusters of the warp-specialized matmul: two CTAs on neighbouring SMs take consecutive CTA
tiles along one dim and share the other operand's block, which TMA multicasts to both.

A CTA tile of 128 x 256 (consumers paired along the columns) reads a's 128-row block and
b's 256-column block each K step. Two CTAs whose tiles are consecutive along the rows read
the same b block: in a cluster, each copies half of it and the copy lands in both CTAs'
shared memory (`UTMALDG.MULTICAST`), so b's traffic from L2 halves and each SM's TMA unit
issues fewer bytes. The cluster pairs along the dim the consumers do not pair, so that the
operand it shares is the wider, paired block. This is `hopper_matmul_mgpu`'s
`cluster_dimension`: worth it when the launch is large enough that the operands' reads
from L2 bound the main loop, not at a launch of one wave.
"""

import dataclasses

__all__ = ["CLUSTER_AXIS", "CLUSTER_SIZE", "CtaCluster", "choose_cluster"]

CLUSTER_SIZE = 2
CLUSTER_AXIS = "cluster"
# Each CTA walks at least this many tiles before a cluster pays: below, the launch is one
# wave whose tiles start together and L2 serves their reads alike.
MIN_TILES_PER_CTA = 2


@dataclasses.dataclass(frozen=True)
class CtaCluster:
    """Two CTAs taking consecutive CTA tiles along `along`, sharing `shared`'s block."""

    along: str
    """The dim along which the cluster's CTAs take consecutive CTA tiles."""
    axis: int
    """`along`'s axis of the tile grid: 0 for the rows, 1 for the columns."""
    shared: str
    """The operand whose block both CTAs read: its copy is multicast."""
    tile_grid: tuple[int, int]
    """Cluster tiles along (rows, cols): the CTA tile grid halved along `along`."""

    @property
    def size(self) -> int:
        return CLUSTER_SIZE

    def check_invariants(self, cta_tile_grid: tuple[int, int]) -> None:
        assert self.axis in (0, 1)
        grid = list(cta_tile_grid)
        assert grid[self.axis] % CLUSTER_SIZE == 0
        grid[self.axis] //= CLUSTER_SIZE
        assert tuple(grid) == self.tile_grid

    def __str__(self) -> str:
        return (
            f"clusters of {CLUSTER_SIZE} CTAs along {self.along}, sharing `{self.shared}`'s "
            "block by TMA multicast"
        )


def choose_cluster(
    tile_grid: tuple[int, int],
    names: tuple[str, str],
    paired: str,
    operands: tuple[str, str],
    tiles: int,
    sms: int,
    ragged: bool,
    declared: bool | None = None,
) -> tuple[CtaCluster | None, str]:
    """The cluster for a warp-specialized launch of CTA tiles `tile_grid` along `names`
    (rows, cols), whose consumers pair along `paired`, multiplying `operands` (a, b); and
    why, for the plan. Along the dim the consumers do not pair where its CTA tiles are even
    (the shared block is then the paired, wider one), else along the other. None where the
    launch is under two tiles a CTA, both dims have an odd count of CTA tiles (a cluster
    would take a tile past the edge), or rows are ragged (items are placed by data, and two
    CTAs' items need not share a group's weights). A kernel's `cluster` constant decides
    instead of the launch's size: False takes none, True one wherever the tiles allow."""
    if declared is False:
        return None, "no cluster: cluster=False"
    if ragged:
        return None, "no cluster: the rows are ragged"
    if declared is None and tiles < MIN_TILES_PER_CTA * sms:
        return None, f"no cluster: {tiles} CTA tile(s), under {MIN_TILES_PER_CTA} a CTA"
    unpaired = 0 if paired == names[1] else 1
    axis = next((ax for ax in (unpaired, 1 - unpaired) if tile_grid[ax] % CLUSTER_SIZE == 0), None)
    if axis is None:
        return None, f"no cluster: odd counts of CTA tiles {list(tile_grid)}"
    # Consecutive tiles along the rows read the same columns of b, and along the columns
    # the same rows of a.
    shared = operands[1] if axis == 0 else operands[0]
    grid = list(tile_grid)
    grid[axis] //= CLUSTER_SIZE
    cluster = CtaCluster(names[axis], axis, shared, (grid[0], grid[1]))
    if declared:
        return cluster, "clustered: cluster=True"
    return cluster, f"clustered: {tiles} CTA tiles, {MIN_TILES_PER_CTA} or more a CTA"

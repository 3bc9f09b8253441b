"""The CPU recipe's knobs of one outer band (`BandConfig`) and the sizes its mapping is built
around: the accumulator budget of a register tile, the parallel thresholds, the vector strip.
The recipe (`akg.schedules.cpu`) turns them into Config steps and applies them; the heuristic
(`akg.schedules.cpu_defaults`) picks them for each band."""

from __future__ import annotations

from dataclasses import dataclass

REGISTER_BYTES = 1024  # accumulators of a register tile by default: 16 AVX-512 registers
# Below this many statement instances under a band a thread launch costs more than it saves:
# a launch, its wake-ups and the join take ~1.5-2 us on a 2-core Xeon VM (more when the other
# core is busy), so a kernel that runs under ~6 us on one core loses in parallel. An instance
# of a band with a reduction below (one multiply-add of a conv or matmul, vectorised) is a few
# times cheaper than one of a band without (an output element): ResNet-18 width 16 at 32 px
# lost 1.4-1.9 us on each of its 3x3 convs of ~300K multiply-adds and ~1.5 us on every smaller
# kernel run in parallel (2 Xeon cores, each kernel alone, 1 thread against 2)
PARALLEL_MIN_POINTS = 1 << 16
PARALLEL_MIN_REDUCTION_POINTS = 1 << 19
CHUNKS_PER_CORE = 4  # parallel chunks of an outer loop per core, by default
CACHE_LEVEL, REGISTER_LEVEL = "L2", "registers"  # the levels of the two tiles
COLUMN_RUN_BYTES = 1024  # contiguous bytes of a row a column reduction reads per step
PREFETCH_DISTANCES = (0, 1, 2, 4, 8)  # iterations of a multi-pass band's row loop prefetched ahead
REDUCTION_BLOCKS = (8, 16, 32, 64)  # iterations of a reduction's outer loop per block, for the tuner


def vector_strip(extent: int, lanes: int) -> int:
    """Width of the vector strip a CPU register tile computes along a loop of `extent`: two
    vectors when they divide the loop, else one (a partial last tile runs as a remainder).
    The CPU mapping tiles by it and constant weights are stored in panels of it, so that each
    vector load of the strip is one contiguous slice (`akg.graph.layout`)."""
    if extent % (2 * lanes) == 0:
        return 2 * lanes
    return lanes if extent >= lanes else extent


@dataclass(frozen=True)
class BandConfig:
    """The CPU steps of one outer band as knobs: member order (a permutation, innermost last),
    cache-level and register-level tile sizes per member (0 = untiled), and whether the
    register loops sink below the band's inner loops (reductions)."""

    order: tuple[int, ...]
    tile: tuple[int, ...]
    register: tuple[int, ...]
    sink: bool = False
    pack: bool = False  # copy operands reused across the other tiles into a blocked local buffer
    # software prefetch, in iterations of the loop over rows (or row blocks) of a band whose
    # rows several passes read (a layer norm, softmax), or over the blocks of a blocked
    # reduction: 0 leaves it to the hardware prefetcher
    prefetch: int = 0
    # a blocked reduction: iterations of the reduction's outer loop (a conv's input channels)
    # per block, inside the cache tile and outside its register tiles, so that a block of the
    # operands (a slice of the weight) serves every register tile of the cache tile while it is
    # in L1, and the partial sums of the cache tile wait in a local buffer; 0: not blocked
    block: int = 0
    # the band's producers (`BandInfo.producers`: a conv's or pool's padded input) run no loop
    # nest of their own: each cache tile computes the part of their tensors it reads into a
    # local buffer (`tree.MARK_RECOMPUTE`); needs a cache tile, else ignored
    recompute: bool = False
    # the band's outer loop runs on every core even where its work is below
    # `parallel_threshold` (set there for the Xeon VM's ~1.5-2 us launches): on a host whose
    # launches are cheaper small kernels gain (Zen 4, ~0.8 us: ResNet-18 width 16's 3x3 convs of
    # ~295K multiply-adds 6.5 -> 4.7 us, LeNet-5's first conv 16 -> 7 us), so the tuner measures
    # it (`CpuRecipe.alternative_configs`). Step: ["map", k, "cores", null]
    parallel: bool = False

    def __post_init__(self):
        for name in ("order", "tile", "register"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "prefetch", int(self.prefetch))
        object.__setattr__(self, "block", int(self.block))
        object.__setattr__(self, "recompute", bool(self.recompute))
        object.__setattr__(self, "parallel", bool(self.parallel))

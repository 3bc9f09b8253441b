"""CUDA preparation of a kernel's tensor expressions: a reduction to one value (a full sum or
max) has no parallel loop at all, and would run in one thread, so it is split (rfactor) into
`lanes` partial reductions, which the mapping spreads over threads, and a short final
reduction of the partials: partial[l] = sum_{ro, rest} src(r = ro * lanes + l, rest),
out = sum_l partial[l]. The partials run as one kernel and the final reduction as the next
(a grid-wide synchronisation between them). A reduction with several outputs is left alone:
isl fuses its partials under the loop over the outputs, which is all the mapping maps (an
inner band mapped to threads, and reductions across the threads of a block, are the next
steps)."""

from __future__ import annotations

import math

from akg.graph.compute.lower import Program, rfactor_reductions

SPLIT_REDUCERS = ("sum", "prod", "max", "min")
FEW_OUTPUTS = 2  # output points below which a reduction is split (one: a full reduction)
MANY_TERMS = 1024  # ... when it reduces at least this many terms per output point
MIN_LANES = 8


def _lanes(extent: int, want: int) -> int:
    """The largest divisor of `extent` no larger than `want` (so each lane reduces whole
    strides of the axis)."""
    for lanes in range(min(extent, want), 0, -1):
        if extent % lanes == 0:
            return lanes
    return 1


def split_for_threads(program: Program, threads: int) -> Program:
    """The program with each reduction of fewer than FEW_OUTPUTS output points over at least
    MANY_TERMS terms split into at most `threads` partial reductions (a divisor of its first
    reduction axis; see the module)."""

    def lanes_of(op, red) -> int:
        if not red.axes:  # a reduction over no axis (`sum(x, axes=[])`): a copy
            return 0
        outputs = math.prod(a.extent for a in op.axes)
        terms = math.prod(r.extent for r in red.axes)
        lanes = _lanes(red.axes[0].extent, max(1, threads // max(1, outputs)))
        ok = red.reducer in SPLIT_REDUCERS and outputs < FEW_OUTPUTS and terms >= MANY_TERMS and lanes >= MIN_LANES
        return lanes if ok else 0

    return rfactor_reductions(program, lanes_of)

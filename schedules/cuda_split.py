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

from akg.graph.compute.expr import ComputeOp, Load, compute, rebuild, reduce, reduce_axis, substitute
from akg.graph.compute.lower import Program

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
    remap: dict[int, object] = {}

    def rewrite(e):
        return rebuild(e, lambda n: Load(remap[id(n.tensor)], n.indices)
                       if isinstance(n, Load) and id(n.tensor) in remap else None)

    for op in program.ops():
        red = op.reduce
        body = rewrite(op.body)
        outputs = math.prod(a.extent for a in op.axes)
        terms = math.prod(r.extent for r in red.axes) if red is not None else 0
        lanes = _lanes(red.axes[0].extent, max(1, threads // max(1, outputs))) if red is not None else 1
        if red is not None and red.reducer in SPLIT_REDUCERS and outputs < FEW_OUTPUTS and terms >= MANY_TERMS \
                and lanes >= MIN_LANES:
            first, rest = red.axes[0], list(red.axes[1:])
            shape = [a.extent for a in op.axes]
            src = rewrite(red.source)

            def partial_body(*idx, op=op, first=first, rest=rest, src=src, lanes=lanes, reducer=red.reducer):
                ro = reduce_axis(first.extent // lanes, f"{op.name}.ro")
                inner = [reduce_axis(r.extent, f"{op.name}.r{k}") for k, r in enumerate(rest)]
                mapping = dict(zip(op.axes, idx[:-1]))
                mapping[first] = ro * lanes + idx[-1]
                mapping.update(zip(rest, inner))
                return reduce(reducer, substitute(src, mapping), [ro, *inner])

            partial = compute([*shape, lanes], partial_body, f"{op.name}.partial")
            lane = reduce_axis(lanes, f"{op.name}.lane")
            remap[id(op.output)] = compute(shape, lambda *i, p=partial, lane=lane, reducer=red.reducer:
                                           reduce(reducer, p[(*i, lane)], [lane]), op.name)
        elif body is not op.body:
            remap[id(op.output)] = ComputeOp(op.name, op.axes, body).output
    if not remap:
        return program
    outputs = [remap.get(id(t), t) for t in program.outputs]
    return Program(program.name, program.inputs, outputs, program.params, program.complex_io)

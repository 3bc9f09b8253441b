"""Software prefetch of the rows (or row blocks) ahead of a multi-pass loop, placed where the
core has time for it.

The generator (`astgen`) finds what an iteration `distance` steps ahead reads, as streams:
(buffer, first element, cache lines, elements per line). `spread` puts their prefetches into
the pass of the loop's body that computes most (the serial loop around a vector loop with the
most arithmetic: a softmax's exponentials) among those that store nothing beyond the
iteration's own buffers (not a layer norm's output pass), a share of the lines per iteration,
so the next rows stream in while this one computes, rather than a burst of prefetches at the top of the
iteration that stalls the core before its compute begins (4096 x 1024 softmax on AVX-512:
0.91 -> 0.69 ms, 66% -> 87% of the stream floor's bandwidth)."""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from tvm import tirx

from akg.polyhedral.tirstmt import buffers, loops, replace, seq, substatements


class Stream(NamedTuple):
    buffer: tirx.Buffer
    start: tirx.PrimExpr  # the first element read, flat
    lines: int  # cache lines an iteration reads of it
    per_line: int  # elements per cache line
    view: tirx.Buffer | None = None  # a flat (1-d) view of the buffer: a line's address without div/mod


def spread(body: tirx.Stmt, streams: list[Stream], prefetch: Callable[[tirx.BufferLoad], tirx.Stmt],
           nest: bool = False) -> tirx.Stmt:
    """`body` of a loop with the prefetches of `streams` spread over the iterations of its
    pass that computes most; without such a pass, at the top of the iteration. `nest`: over
    the outermost loop around that pass instead (`_spread_nest`)."""
    best, most = None, 0
    passes = _serial_vector_passes(body)
    # preferably a pass that stores only into buffers of the iteration (a reduction's
    # accumulators, a softmax's exponentials), not the output: there the prefetched lines
    # stream in beside loads alone. Spread over a layer norm's output pass they came too late
    # or competed with its stores (4096 x 1024 on Zen 4: 0.425 ms against 0.344 over its
    # variance pass, 0.419 with no prefetch; hand edits, alternating rounds). And not a pass
    # that a loop of the body repeats (a block of rows, each running the pass): every row of
    # the block would prefetch the lines again
    own = buffers(body, tirx.AllocBuffer)
    quiet = [loop for loop in passes if buffers(loop.body) <= own and len(_enclosing(body, loop)) == 1]
    for loop in quiet or passes:
        work = int(loop.extent.value) * _arithmetic(loop.body)
        if work > most:
            best, most = loop, work
    if best is None:
        return seq([_lines(streams, prefetch), body])
    if nest:
        return _spread_nest(body, best, streams, prefetch)
    # a stream of one line (a row's mean and rstd) is prefetched once, at the top: spread, every
    # iteration would prefetch it again. Every other stream gets its lines in proportion to the
    # pass's iterations, each line once (`_share`): one line every two iterations for a row of
    # 64 lines under a pass of 128 vectors of 8 lanes on AVX2, where it had been one burst at
    # the top that stalled the row's first pass (4096 x 1024 layer-norm backward on Zen 3: 2.72
    # -> 1.83 ms in a hand edit).
    once = [s for s in streams if s.lines <= 1]
    shared = [_share(s, best.loop_var, int(best.extent.value), prefetch) for s in streams if s.lines > 1]
    if not shared:
        return seq([_lines(once, prefetch), body])
    spread_loop = tirx.For(best.loop_var, best.min, best.extent, best.kind, seq([*shared, best.body]),
                           best.thread_binding, best.annotations)
    spread_body = replace(body, best, spread_loop)
    return seq([_lines(once, prefetch), spread_body]) if once else spread_body


def _share(s: Stream, step: tirx.Var, extent: int, prefetch) -> tirx.Stmt:
    """The prefetches of iteration `step` of `extent` for a stream of `s.lines` lines: lines
    [step * lines // extent, (step + 1) * lines // extent), so each line once over the loop."""
    lines = s.lines
    p = tirx.Var("pf", "int32")
    if lines % extent == 0:  # a whole number of lines per iteration
        per = lines // extent
        return tirx.For(p, 0, per, tirx.ForKind.SERIAL, prefetch(_element(s, step * per + p)))
    if extent % lines == 0:  # one line every `every` iterations
        every = extent // lines
        return tirx.IfThenElse(tirx.floormod(step, every) == 0,
                               prefetch(_element(s, tirx.floordiv(step, every))), None)
    if lines < extent:  # at most one line per iteration: where a new one begins
        return tirx.IfThenElse(tirx.floormod(step * lines, extent) < lines,
                               prefetch(_element(s, tirx.floordiv(step * lines, extent))), None)
    first = tirx.floordiv(step * lines, extent)
    count = tirx.floordiv((step + 1) * lines, extent) - first
    return tirx.For(p, 0, count, tirx.ForKind.SERIAL, prefetch(_element(s, first + p)))


def _spread_nest(body: tirx.Stmt, best: tirx.For, streams: list[Stream], prefetch) -> tirx.Stmt:
    """The prefetches spread over the iterations of the outermost serial loop of constant
    extent around `best` in `body` (under a block of a reduction: the loop over its register
    tiles), each line once, and within each of its iterations over the next serial loop of
    the reduction that holds more than `best` (a conv's loop over the block's input channels,
    around its kernel window): a few lines per step of the reduction keep misses in flight
    while the core computes, where a burst at the top of each register tile left the fill
    buffers idle for the rest of it (ResNet-18's 3x3 conv over 512 channels at 7 px with its
    9.4 MB weight from memory: 890 -> 679 us, near its cache-warm 630 us). Not in the
    loops right around the FMAs, where a prefetch call kept LLVM from holding the
    accumulators in registers."""
    around = [f for f in (_enclosing(body, best) or [best])
              if f.kind == tirx.ForKind.SERIAL and isinstance(f.extent, tirx.IntImm)]
    outer = around[0] if around else best
    inner = around[1] if len(around) > 3 else None  # not best, nor the loop right around it
    step, total = outer.loop_var, int(outer.extent.value)
    stmts, inner_stmts = [], []
    for s in streams:
        if s.lines >= total:
            share = -(-s.lines // total)
            p = tirx.Var("pf", "int32")
            if inner is not None and share > 1:
                per = -(-share // int(inner.extent.value))
                within = inner.loop_var * per + p
                line = step * share + within
                inner_stmts.append(tirx.For(p, 0, per, tirx.ForKind.SERIAL, tirx.IfThenElse(
                    tirx.all(within < share, line < s.lines), prefetch(_element(s, line)), None)))
                continue
            line = step * share + p
            stmts.append(tirx.For(p, 0, share, tirx.ForKind.SERIAL,
                                  tirx.IfThenElse(line < s.lines, prefetch(_element(s, line)), None)))
        else:  # one line every total / lines iterations, evenly
            stmts.append(tirx.IfThenElse(tirx.floormod(step * s.lines, total) < s.lines,
                                         prefetch(_element(s, tirx.floordiv(step * s.lines, total))), None))
    if inner_stmts:
        body = replace(body, inner, _prepended(inner, inner_stmts))
        outer = next(f for f in loops(body) if f.loop_var.same_as(outer.loop_var))
    return replace(body, outer, _prepended(outer, stmts)) if stmts else body


def _prepended(loop: tirx.For, stmts: list[tirx.Stmt]) -> tirx.For:
    """`loop` with `stmts` at the top of its body."""
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, seq([*stmts, loop.body]),
                    loop.thread_binding, loop.annotations)


def _element(s: Stream, line: tirx.PrimExpr) -> tirx.BufferLoad:
    """The element at the start of cache line `line` of a stream (clamped to the buffer)."""
    size = int(np.prod([int(d) for d in s.buffer.shape], dtype=np.int64))
    flat = tirx.min(s.start + line * s.per_line, size - 1)
    if s.view is not None:
        return tirx.BufferLoad(s.view, [flat])
    index = []
    for extent in reversed(s.buffer.shape):  # the flat element's indices, innermost last
        index.insert(0, tirx.floormod(flat, int(extent)))
        flat = tirx.floordiv(flat, int(extent))
    return tirx.BufferLoad(s.buffer, index)


def _enclosing(stmt: tirx.Stmt, target: tirx.For) -> list[tirx.For] | None:
    """The loops of `stmt` around `target`, outermost first, `target` last (None: not found)."""
    if stmt.same_as(target):
        return [target]
    for sub in substatements(stmt):
        found = _enclosing(sub, target)
        if found is not None:
            return ([stmt] if isinstance(stmt, tirx.For) else []) + found
    return None


def _lines(streams: list[Stream], prefetch) -> tirx.Stmt:
    """Prefetches of every line of each stream (a burst). A prefetch is a hint: an address past
    the end is not read."""
    stmts = []
    for k, s in enumerate(streams):
        p = tirx.Var(f"pf{k}", "int32")
        stmts.append(tirx.For(p, 0, s.lines, tirx.ForKind.SERIAL, prefetch(_element(s, p))))
    return seq(stmts)


def _serial_vector_passes(body: tirx.Stmt) -> list[tirx.For]:
    """The innermost serial loops of constant extent >= 2 in `body` around a vector loop."""
    found = [f for f in loops(body) if f.kind == tirx.ForKind.SERIAL and isinstance(f.extent, tirx.IntImm)
             and f.extent.value >= 2 and any(g.kind == tirx.ForKind.VECTORIZED for g in loops(f.body))]
    return [f for f in found if not any(g is not f and any(h.same_as(g) for h in loops(f.body)) for g in found)]


def _arithmetic(stmt: tirx.Stmt) -> int:
    """How much a statement computes per run, roughly: the size of its stores' values."""
    if isinstance(stmt, tirx.BufferStore):
        return len(str(stmt.value))
    return sum(_arithmetic(s) for s in substatements(stmt))

"""Scheduling: the isl scheduler turns statements + dependences into a schedule tree; the
fusion strategy is a knob, and an operation quota bounds the work."""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from dataclasses import dataclass

import islpy as isl
import psutil

from akg.errors import ScheduleError
from akg.polyhedral.bands import (affs_by_statement, navigate, outer_band_paths, recomputable_producers,
                                  statement_names)
from akg.polyhedral.deps import Dependences
from akg.polyhedral.model import PolyModel
from akg.polyhedral.tree import all_bands

log = logging.getLogger(__name__)

FUSION_STRATEGIES = ("max", "smart", "none")
DEFAULT_MAX_OPERATIONS = 2_000_000
# isl counts simplex pivots, and with constant sizes a pivot on growing integer coefficients
# can take milliseconds, so the quota alone may allow minutes; the scheduler also runs in a
# forked child under this limit on its CPU time. CPU time, not wall-clock time: with a
# wall-clock limit, a compile that got little CPU (niced, beside a benchmark) dropped kernels
# whose isl schedule takes 0.5 s of CPU (ResNet-18's Winograd input transforms at 14 px) to the
# sequential schedule, so the same model compiled to other code by the host's load. A
# wall-clock backstop of WALL_FACTOR times the limit still stops a child that gets almost no CPU.
DEFAULT_MAX_SECONDS = 4.0
WALL_FACTOR = 10
POLL_SECONDS = 0.05


class _ScheduleTimeout(Exception):
    pass


@dataclass(eq=False)
class ScheduleResult:
    schedule: isl.Schedule
    fusion: str
    fallback: str | None = None  # why the simple schedule was used instead of isl's


def _configure(ctx: isl.Context, fusion: str) -> None:
    ctx.set_schedule_max_constant_term(0)  # no loop shifting: fuse only where indices line up
    ctx.set_schedule_serialize_sccs(fusion == "none")
    ctx.set_schedule_outer_coincidence(fusion == "smart")
    ctx.set_schedule_whole_component(fusion == "max")
    ctx.set_schedule_maximize_band_depth(False)
    ctx.set_schedule_treat_coalescing(True)


def schedule(model: PolyModel, deps: Dependences, fusion: str = "smart",
             max_operations: int = DEFAULT_MAX_OPERATIONS,
             max_seconds: float | None = DEFAULT_MAX_SECONDS) -> ScheduleResult:
    """Schedule tree of the model. When isl exceeds `max_operations` or `max_seconds` (or
    fails), fall back to the sequential program-order schedule and say so in `fallback`."""
    if fusion not in FUSION_STRATEGIES:
        raise ScheduleError(f"unknown fusion strategy '{fusion}' (known: {', '.join(FUSION_STRATEGIES)})")
    if not model.statements:
        return ScheduleResult(isl.Schedule.from_domain(model.domain), fusion)
    ctx = model.ctx
    _configure(ctx, fusion)
    constraints = (isl.ScheduleConstraints.on_domain(model.domain)
                   .set_validity(deps.validity)
                   .set_coincidence(deps.validity)
                   .set_proximity(deps.flow))
    ctx.reset_operations()
    ctx.set_max_operations(max_operations)
    try:
        result = normalize(_compute(constraints, ctx, max_seconds), deps)
        producers = _producers_run_backwards(model, result) if fusion == "smart" else ()
        if producers:
            result = _producers_apart(model, deps, producers, ctx, max_seconds) or result
        return ScheduleResult(result, fusion)
    except _ScheduleTimeout as e:
        reason = str(e)
    except isl.Error as e:
        text = str(e)
        reason = ("isl operation quota exceeded" if "maximal number of operations" in text
                  else f"isl scheduler failed: {text}")
    finally:
        ctx.set_max_operations(0)
        ctx.reset_operations()
    log.info("schedule of %s: %s; using the sequential schedule", model.program.name, reason)
    return ScheduleResult(sequential_schedule(model), fusion, fallback=reason)


def _producers_run_backwards(model: PolyModel, sched: isl.Schedule) -> tuple[str, ...]:
    """Producers that isl fused into the outer band of the statements reading them by running
    the band backwards: a padded copy of a conv's input, read at rows and columns ahead of the
    output's, fits in the output's loops without a shift only in reverse. With one input
    channel (a LeNet- or MNIST-like first conv, padding 1) it then fused the pad, the conv and
    its epilogue under the batch loop alone, in reversed loops that nothing maps well (8 images,
    1 -> 8 channels, 3x3 at 28 px: 494 us against 19 with the pad apart, as with 3 channels)."""
    out: list[str] = []
    for path in outer_band_paths(sched):
        node = navigate(sched, path)
        names = statement_names(node)
        fused = [p for p in names if p in recomputable_producers(model, [n for n in names if n != p])]
        if fused and _reversed(model, node, names):
            out += fused
    return tuple(out)


def _reversed(model: PolyModel, node: isl.ScheduleNode, names) -> bool:
    """Does some member of the band, or of a band below it, step a statement's iterator
    backwards?"""
    if node.get_type() == isl.schedule_node_type.band:
        mupa = node.band_get_partial_schedule()
        for d in range(node.band_n_member()):
            affs = affs_by_statement(mupa.get_at(d))
            for name in names:
                aff = affs.get(name)
                if aff is not None and any(aff.get_coefficient_val(isl.dim_type.in_, i).to_python() < 0
                                           for i in range(len(model.statement(name).iters))):
                    return True
    return any(_reversed(model, node.child(k), names) for k in range(node.n_children()))


def _producers_apart(model: PolyModel, deps: Dependences, producers: tuple[str, ...], ctx: isl.Context,
                     max_seconds: float | None) -> isl.Schedule | None:
    """The statements in program order, cut before and after each of the producers: each
    piece scheduled by isl with the dependences inside it, the pieces in sequence. Every
    dependence runs forward in program order (a producer reads only what is complete before it,
    its readers come after it), so the sequence keeps them; checked, None if it does not."""
    pieces: list[list] = [[]]
    for st in sorted(model.statements, key=lambda st: st.position):
        if st.name in producers:
            pieces += [[st], []]
        else:
            pieces[-1].append(st)
    result = None
    for piece in (p for p in pieces if p):
        domain = isl.UnionSet.empty(model.domain.get_space())
        for st in piece:
            domain = domain.union(isl.UnionSet.from_set(st.domain))
        validity = deps.validity.intersect_domain(domain).intersect_range(domain)
        constraints = (isl.ScheduleConstraints.on_domain(domain).set_validity(validity)
                       .set_coincidence(validity)
                       .set_proximity(deps.flow.intersect_domain(domain).intersect_range(domain)))
        part = _compute(constraints, ctx, max_seconds)
        result = part if result is None else result.sequence(part)
    result = normalize(result, deps)
    return result if respects(result, deps) else None


def _compute(constraints: isl.ScheduleConstraints, ctx: isl.Context, max_seconds: float | None) -> isl.Schedule:
    """constraints.compute_schedule(), in a forked child that is killed after max_seconds of
    CPU time, or WALL_FACTOR times that of wall-clock time (islpy holds the GIL, so nothing in
    this process could interrupt it). The child sends the schedule tree back as text."""
    if not max_seconds or not hasattr(os, "fork"):
        return constraints.compute_schedule()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only isl and os calls, then _exit (no atexit, no inherited state)
        code = 1
        try:
            os.close(read_end)
            try:
                data = b"S" + constraints.compute_schedule().to_str().encode()
            except isl.Error as e:
                data = b"E" + str(e).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + WALL_FACTOR * max_seconds
    try:
        while True:
            if not select.select([read_end], [], [], POLL_SECONDS)[0]:
                if _cpu_seconds(pid) > max_seconds:
                    os.kill(pid, signal.SIGKILL)
                    raise _ScheduleTimeout(f"isl scheduler took over {max_seconds:g} s of CPU time")
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    raise _ScheduleTimeout(f"isl scheduler ran over {WALL_FACTOR * max_seconds:g} s "
                                           f"(wall clock) with under {max_seconds:g} s of CPU time")
                continue
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    data = b"".join(chunks)
    if data[:1] == b"S":
        return isl.Schedule.read_from_str(ctx, data[1:].decode())
    raise isl.Error(data[1:].decode() if data[:1] == b"E" else "the isl scheduler process died")


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process `pid` has used; 0 where it cannot be read (it
    has just exited: its pipe is read next)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0.0
    return times.user + times.system


def respects(schedule: isl.Schedule, deps: Dependences) -> bool:
    """Does every dependence go forward in the schedule? The schedule's map orders the
    children of a set node as listed, but a set leaves their order to the AST generator, which
    may reorder them (it put a pad before the conv it pads once a band had been moved below
    the set), so a dependence between two children of a set that the schedule above the set
    does not order fails too."""
    sched = schedule.get_map()
    steps = deps.validity.apply_domain(sched).apply_range(sched)
    return steps.is_subset(_forward(steps)) and not _unordered_in_a_set(schedule.get_root(), deps.validity)


def _unordered_in_a_set(node: isl.ScheduleNode, validity: isl.UnionMap) -> bool:
    """Is there a set node below `node` with a dependence between two of its children at equal
    values of the schedule above it?"""
    if node.get_type() == isl.schedule_node_type.set:
        prefix = node.get_prefix_schedule_union_map()
        same = prefix.apply_range(prefix.reverse())
        filters = [node.child(k).filter_get_filter() for k in range(node.n_children())]
        for i, a in enumerate(filters):
            for j, b in enumerate(filters):
                if i != j and not validity.intersect_domain(a).intersect_range(b).intersect(same).is_empty():
                    return True
    return any(_unordered_in_a_set(node.child(k), validity) for k in range(node.n_children()))


def _forward(steps: isl.UnionMap) -> isl.UnionMap:
    out = isl.UnionMap.empty(steps.get_space())
    maps: list[isl.Map] = []
    steps.foreach_map(maps.append)
    for m in maps:
        space = m.get_space().domain()
        out = out.union(isl.UnionMap.from_map(isl.Map.lex_lt(space).intersect(m)))
    return out


def normalize(schedule: isl.Schedule, deps: Dependences) -> isl.Schedule:
    """Shape isl's tree for mapping: a band mixing parallel and sequential (reduction) loops is
    split between them, and a reduction band above a sequence whose first steps do not use it
    (an init statement scheduled at 0) is moved into the sequence's children, so the init runs
    outside the reduction loop, and a band whose values the schedule above it fixes goes (see
    `_determined`). Each change is kept only if dependences still hold."""
    changed = True
    while changed:
        changed = False
        for node in all_bands(schedule):
            if _determined(node):
                schedule, changed = node.delete().get_schedule(), True
                break
            n = node.band_n_member()
            flags = [bool(node.band_member_get_coincident(d)) for d in range(n)]
            if n > 1 and len(set(flags)) > 1:
                first = flags.index(not flags[0])
                schedule, changed = node.band_split(first).get_schedule(), True
                break
            child = node.child(0)
            if (not any(flags) and child.get_type() in (isl.schedule_node_type.sequence,
                                                        isl.schedule_node_type.set)):
                candidate = node.band_sink().get_schedule()
                if respects(candidate, deps):
                    schedule, changed = candidate, True
                    break
    return schedule


def _determined(node: isl.ScheduleNode) -> bool:
    """Does the schedule above the band `node` fix its value at every statement instance below
    it, so that the band orders nothing? isl completes a statement's schedule to full rank: under
    an outer band over a reshaped output's rows and columns (16 i0 + i2, 16 i1 + i3: an
    attention's heads merged back into the hidden dim) it adds a band over (-i2, -i3), which
    the mapping would then tile as loops of one trip and vectorize along the wrong dim (a
    transformer's context product: 10 us for 65 kFLOP). A band of one point is no such band
    (see below)."""
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
    if prefix.is_empty():
        return False
    values = node.band_get_partial_schedule_union_map().intersect_domain(domain)
    if isl.Set.from_union_set(values.range()).is_singleton():
        # a band of one point stays (a reduction's init under its sunk band, at 0; a Winograd
        # output transform's copy out of its tiles): the mappings' defaults were measured with
        # it there (the band analysis skips it as a loop: `bands.reduction_band`)
        return False
    return prefix.reverse().apply_range(values).is_single_valued()


def sequential_schedule(model: PolyModel) -> isl.Schedule:
    """Program order, one loop nest per statement: always valid, never fused."""
    root = isl.Schedule.from_domain(model.domain).get_root().child(0)
    filters = isl.UnionSetList.alloc(model.ctx, len(model.statements))
    for s in model.statements:
        filters = filters.add(isl.UnionSet.from_set(s.domain))
    node = root.insert_sequence(filters)
    for k, s in enumerate(model.statements):
        if not s.iters:
            continue
        child = node.child(k).child(0)
        child = child.insert_partial_schedule(_identity_mupa(model.ctx, s))
        child = child.band_set_permutable(1)
        for d, v in enumerate(s.iters):
            child = child.band_member_set_coincident(d, not v.reduce)
        node = child.parent().parent()
    return node.get_schedule()


def _identity_mupa(ctx: isl.Context, s) -> isl.MultiUnionPwAff:
    names = ", ".join(f"i{d}" for d in range(len(s.iters)))
    pieces = ", ".join(f"{{ {s.name}[{names}] -> [(i{d})] }}" for d in range(len(s.iters)))
    return isl.MultiUnionPwAff(f"[{pieces}]", context=ctx)

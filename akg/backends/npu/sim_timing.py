"""The NPU simulator's timing: `_Timeline`, the pipe model of one block on one core (dispatch
queues per pipe, flags, barriers, GM transfers sharing the core's HBM and L2 rates, loops
extrapolated once their state repeats), and `_time_block`. Used by `akg.backends.npu.sim`."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from akg.backends.npu.errors import NpuSyncError
from akg.backends.npu.sim_compile import BARRIER, GMDMA, LOOP, MTE2, MTE3, S, SCALAR, SET, WAIT, WORK, _Compiler, _Op
from akg.backends.npu.sim_races import _flag_names
from akg.backends.npu.spec import NpuSpec

STEADY_TRIES = 16  # iterations of a loop compared for a repeating state before giving up


# --- timing ------------------------------------------------------------------------------------


class _Timeline:
    """The pipe model of one block on one core. `share` and `l2_share` are the core's parts of
    the HBM cap and of the L2 rate in bytes per cycle; `hbm` gives, per GM read DMA (by listing
    index), the part of its bytes that comes from HBM (the rest hits the L2; default 1)."""

    def __init__(self, spec: NpuSpec, share: float, trace: bool, l2_share: float = math.inf,
                 hbm: Mapping[int, float] | None = None):
        self.spec, self.share, self.l2_share = spec, share, l2_share
        self.hbm = hbm or {}
        self.hbm_bound = False  # did the HBM share ever limit a transfer (else fewer misses time the same)
        self.depth = spec.queue_depth
        self.t = 0  # the scalar unit's dispatch time
        self.free = [0] * 6
        self.ring = [[0] * self.depth for _ in range(6)]
        self.pos = [0] * 6
        self.flags: dict[tuple, deque] = {}
        # GM transfers: (start, end, bytes/cycle through the L2, of them bytes/cycle from HBM)
        self.segments = {MTE2: deque(), MTE3: deque()}
        self.busy = [0] * 6
        self.trace: list | None = [] if trace else None
        self.extrapolate = not trace

    def run(self, body: list[_Op], env: dict) -> None:
        spec = self.spec
        free, ring, pos, busy, depth = self.free, self.ring, self.pos, self.busy, self.depth
        dispatch, fc = spec.dispatch_cycles, spec.flag_cycles
        for op in body:
            kind = op.kind
            if kind == LOOP:
                self._loop(op, env)
                continue
            p = op.pipe
            t = self.t
            if p != S:
                slot = pos[p]
                queued = ring[p][slot]
                if queued > t:
                    t = queued
            t += dispatch
            busy[S] += dispatch
            if kind == WORK:
                start = free[p] if free[p] > t else t
                end = free[p] = start + op.cost
                busy[p] += op.cost
            elif kind == GMDMA:
                start = free[p] if free[p] > t else t
                end = free[p] = self._gm(op, start)
                busy[p] += end - start
            elif kind == SCALAR:
                start = t
                end = t = t + op.cost
                busy[S] += op.cost
            elif kind == BARRIER:
                for q in op.barrier:
                    if free[q] > t:
                        t = free[q]
                start = end = t
            else:
                key = op.flag if op.flag_id is None else (*op.flag, op.flag_id(env))
                ready = t
                if kind == WAIT:
                    queue = self.flags.get(key)
                    if not queue:
                        raise NpuSyncError(f"{op.where(tuple(env.items()))} waits for a flag that no set_flag "
                                           f"before it sets: the pipe would wait forever")
                    ready = max(t, queue.popleft())
                if p == S:
                    start = ready
                    end = t = start + fc
                else:
                    start = max(ready, free[p])
                    end = free[p] = start + fc
                busy[p] += fc
                if kind == SET:
                    self.flags.setdefault(key, deque()).append(end)
            if p != S:
                ring[p][slot] = start
                pos[p] = (slot + 1) % depth
            self.t = t
            if self.trace is not None:
                self.trace.append((op, p, start, end, tuple(env.items())))

    def _loop(self, op: _Op, env: dict) -> None:
        name, trip, lc = op.var, op.trip, self.spec.loop_cycles
        steady = self.extrapolate and trip > 2
        prev = None
        for i in range(trip):
            env[name] = i
            self.t += lc
            self.busy[S] += lc
            self.run(op.body, env)
            if steady and i + 1 < trip:
                sig = self._signature()
                if prev is not None and sig == prev[0]:
                    left = trip - 1 - i
                    self._shift(left * (self.t - prev[1]))
                    self.busy[:] = [b + left * (b - pb) for b, pb in zip(self.busy, prev[2])]
                    break
                prev = (sig, self.t, list(self.busy))
                steady = i < STEADY_TRIES
        del env[name]

    def _signature(self) -> tuple:
        """The state that decides every later start time, relative to the dispatch time (a
        time before it acts as the dispatch time itself)."""
        t = self.t
        rel = lambda x: x - t if x > t else 0
        depth = self.depth
        rings = tuple(rel(self.ring[p][(self.pos[p] + j) % depth]) for p in range(1, 6) for j in range(depth))
        flags = tuple(sorted((k, tuple(rel(x) for x in q)) for k, q in self.flags.items() if q))
        segs = tuple(tuple((rel(a), b - t, r, h) for a, b, r, h in self.segments[p] if b > t)
                     for p in (MTE2, MTE3))
        return tuple(rel(f) for f in self.free[1:]), rings, flags, segs

    def _shift(self, dt: int) -> None:
        """Move every time on by `dt` (in place: `run` holds these lists)."""
        self.t += dt
        self.free[:] = [f + dt for f in self.free]
        for r in self.ring:
            r[:] = [x + dt for x in r]
        for q in self.flags.values():
            for i in range(len(q)):
                q[i] += dt
        for p, segs in self.segments.items():
            self.segments[p] = deque((a + dt, b + dt, r, h) for a, b, r, h in segs)

    def _gm(self, op: _Op, start: int) -> int:
        """End of a GM transfer starting at `start`: after the latency, it moves at its path's
        rate within what the other GM pipe of this core leaves of the core's L2 share and, for
        the part `u` of its bytes that misses the L2 (writes: all), of its HBM share."""
        p = op.pipe
        mine, other = self.segments[p], self.segments[MTE3 if p == MTE2 else MTE2]
        other_free = self.free[MTE3 if p == MTE2 else MTE2]
        while other and other[0][1] <= start:
            other.popleft()
        horizon = max(self.t, other_free)
        while mine and mine[0][1] <= horizon:
            mine.popleft()
        share, l2, path = self.share, self.l2_share, op.rate
        u = self.hbm.get(op.index, 1.0) if p == MTE2 else 1.0

        def speed(l2_left: float, hbm_left: float, other_hbm: float = 0.0) -> float:
            rate = min(path, l2_left)
            if u > 0 and hbm_left < rate * u:
                if p == MTE2 or other_hbm > 0:  # a rate that a read's HBM part decides
                    self.hbm_bound = True
                return hbm_left / u
            return rate

        t = start + op.latency
        left = float(op.nbytes)
        for s0, s1, used, used_hbm in list(other):
            if s1 <= t:
                continue
            for a, b, rate in ((t, s0, speed(l2, share)), (max(t, s0), s1, speed(l2 - used, share - used_hbm, used_hbm))):
                if b <= a or rate <= 0:
                    continue
                if left <= rate * (b - a):
                    end = a + math.ceil(left / rate)
                    mine.append((a, end, rate, rate * u))
                    return end
                mine.append((a, b, rate, rate * u))
                left -= rate * (b - a)
            t = s1
        rate = speed(l2, share)
        end = t + math.ceil(left / rate)
        mine.append((t, end, rate, rate * u))
        return end

    @property
    def cycles(self) -> int:
        return max(self.t, *self.free)

    def leftover_flags(self) -> dict[tuple, int]:
        return {key: len(q) for key, q in self.flags.items() if q}


def _time_block(code: _Compiler, spec: NpuSpec, block: int, wave: int, trace: bool,
                hbm: Mapping[int, float] | None = None) -> _Timeline:
    timeline = _Timeline(spec, spec.gm_bytes_per_cycle / wave, trace, spec.l2_rate / wave, hbm)
    env = code.program.block_env(block)
    timeline.run(code.body, env)
    left = timeline.leftover_flags()
    if left:
        raise NpuSyncError(f"kernel '{code.program.name}': block {block} ends with flags still set: "
                           f"{_flag_names(left)}")
    return timeline

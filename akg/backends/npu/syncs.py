"""The NPU backend's sync pass: `set_flag` / `wait_flag` pairs where a buffer written or read
on one pipe is next touched on another, within an iteration and across the iterations of a
loop (`SyncPass`); a loop with its flags is one unit of the pass around it (`Compound`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass
class Unit:
    """An instruction (or a compound loop) as the sync pass sees it: per pipe, the buffer
    slots read and written. A slot is (buffer, half): half None is the whole buffer, "j" the
    current ping-pong half."""

    item: object
    parts: dict  # pipe -> (reads: set, writes: set)


def _conflict(a, b, carried: bool) -> int:
    """0: none; 1: conflict at distance 1 (or within an iteration); 2: only at distance 2
    (both accesses in the same ping-pong half)."""
    (ra, wa), (rb, wb) = a, b
    best = 0
    for x, y in [(wa, rb), (wa, wb), (ra, wb)]:
        for (bx, hx) in x:
            for (by, hy) in y:
                if bx != by:
                    continue
                if not carried or hx is None or hy is None:
                    return 1
                best = 2
    return best


class SyncPass:
    def __init__(self, half: str = None, ids: tuple[int, int, int] = (0, 1, 2)):
        """`half`: the ping-pong variable of a double-buffered loop; `ids`: the flag ids of
        syncs within an iteration, across one iteration, and the first of two per half."""
        from akg.backends.npu import isa

        self.isa = isa
        self.half = half or HALF
        self.ids = ids

    def units(self, items) -> list[Unit]:
        out = []
        for it in items:
            if isinstance(it, tuple) and it[0] == "acc":  # an instruction with its access record
                _, instr, reads, writes = it
                out.append(Unit(instr, {_pipe_of(instr): (set(reads), set(writes))}))
            elif isinstance(it, Compound):
                out.append(Unit(it, it.parts))
            else:
                raise AssertionError(it)
        return out

    def body(self, items, carried: int = 0) -> tuple[list, list, list]:
        """Syncs for one sequence of items; returns (body, before, after): instructions of
        the body with flags, and the flags to set before and wait for after a loop around it
        (`carried`: 0 straight code, 1 a loop, 2 a double-buffered loop over halves)."""
        isa = self.isa
        units = self.units(items)
        sets_after = defaultdict(list)
        waits_before = defaultdict(list)
        know = defaultdict(lambda: defaultdict(lambda: -1))  # pipe -> pipe -> unit index
        snapshot = []
        for n, u in enumerate(units):
            for P, acc in u.parts.items():
                need = {}
                for m in range(n):
                    for Q, acc2 in units[m].parts.items():
                        if Q != P and _conflict(acc, acc2, False):
                            need[Q] = max(need.get(Q, -1), m)
                for Q, m in sorted(need.items()):
                    if know[P][Q] < m:
                        sets_after[m].append(isa.SetFlag(Q, P, self.ids[0]))
                        waits_before[n].append(isa.WaitFlag(Q, P, self.ids[0]))
                        know[P][Q] = m
            snapshot.append({P: dict(know[P]) for P in u.parts})
        before, after = [], []
        if carried:
            # across iterations: a pipe that has not waited for Q yet in this iteration needs
            # Q's conflicting work of the previous iteration (or the one before, for halves)
            needs = {}  # (Q, P, distance) -> [first n, last m]
            for n, u in enumerate(units):
                for P, acc in u.parts.items():
                    for m, u2 in enumerate(units):
                        for Q, acc2 in u2.parts.items():
                            if Q == P:
                                continue
                            d = _conflict(acc, acc2, carried == 2)
                            if not d or snapshot[n][P].get(Q, -1) >= 0:
                                continue
                            key = (Q, P, d)
                            first, last = needs.get(key, (n, m))
                            needs[key] = (min(first, n), max(last, m))
            for (Q, P, d), (n, m) in sorted(needs.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]), kv[0][2])):
                if d == 1:
                    fid = self.ids[1]
                    sets_after[m].append(isa.SetFlag(Q, P, fid))
                    waits_before[n].insert(0, isa.WaitFlag(Q, P, fid))
                    before.append(isa.SetFlag(Q, P, fid))
                    after.append(isa.WaitFlag(Q, P, fid))
                else:
                    h = self.ids[2]
                    fid = isa.var(self.half) + h
                    sets_after[m].append(isa.SetFlag(Q, P, fid))
                    waits_before[n].insert(0, isa.WaitFlag(Q, P, fid))
                    before += [isa.SetFlag(Q, P, h), isa.SetFlag(Q, P, h + 1)]
                    after += [isa.WaitFlag(Q, P, h), isa.WaitFlag(Q, P, h + 1)]
        out = []
        for n, u in enumerate(units):
            out.extend(waits_before[n])
            out.extend(u.item.instrs if isinstance(u.item, Compound) else [u.item])
            out.extend(sets_after[n])
        return out, before, after


def _pipe_of(instr):
    """The pipe of an instruction, or of the one-pipe body of a loop around instructions."""
    from akg.backends.npu import isa

    if isinstance(instr, isa.Loop):
        pipes = {_pipe_of(x) for x in instr.body}
        if len(pipes) != 1:
            raise AssertionError(f"loop over several pipes as one record: {instr}")
        return pipes.pop()
    return instr.pipe


@dataclass
class Compound:
    """Instructions (a loop with its flags) the outer sync pass treats as one unit per pipe."""

    instrs: list
    parts: dict


def _compound(items_with_acc: list, instrs: list) -> Compound:
    parts: dict = {}
    for it in items_with_acc:
        if isinstance(it, Compound):
            src = it.parts.items()
        else:
            _, instr, reads, writes = it
            src = [(_pipe_of(instr), (set(reads), set(writes)))]
        for P, (r, w) in src:
            pr, pw = parts.setdefault(P, (set(), set()))
            pr |= {(b, None) for b, _h in r}
            pw |= {(b, None) for b, _h in w}
    return Compound(instrs, parts)


HALF = "j"

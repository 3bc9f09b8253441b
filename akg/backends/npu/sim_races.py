"""The NPU simulator's race detection (`_Races`: a vector clock per pipe, carried between pipes
by flags and barriers; accesses of different blocks to the same GM bytes) and `_execute`, which
runs a block's compiled instructions through it and NumPy. Used by `akg.backends.npu.sim`."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from akg.backends.npu.errors import NpuRaceError, NpuSyncError
from akg.backends.npu.operands import BLOCK_VAR
from akg.backends.npu.sim_compile import BARRIER, LOOP, PIPE_NAMES, SET, WAIT, _Access, _Op, _overlap

PRUNE_AT = 48  # race records per space before records every pipe has synchronised with go


# --- race detection ----------------------------------------------------------------------------


class _Races:
    """Vector clocks per pipe and the accesses not yet known to be ordered before every later
    access, per memory space."""

    def __init__(self, body: list[_Op], blocks: int):
        pipes: dict[str, set[int]] = {}
        kinds: dict[str, set[tuple[int, bool]]] = {}
        for op in _walk(body):
            for acc in op.accesses:
                pipes.setdefault(acc.space, set()).add(op.pipe)
                kinds.setdefault(acc.space, set()).add((op.pipe, acc.write))
        # a space needs tracking only where two pipes meet on it, one writing
        self.tracked = {space: frozenset(pipes[space]) for space, ks in kinds.items()
                        if any(p != q and (w or x) for p, w in ks for q, x in ks)}
        self.cross = {space for space, ks in kinds.items()
                      if blocks > 1 and space.startswith("GM:") and any(w for _, w in ks)}
        self.gm_accesses: dict[str, list[tuple[int, bool, int, _Access, _Op, tuple]]] = {s: [] for s in self.cross}
        self.reset()

    def reset(self) -> None:
        self.clocks = [[0] * 6 for _ in range(6)]
        self.records: dict[str, list[tuple]] = {space: [] for space in self.tracked}
        self.flags: dict[tuple, deque] = {}
        self.barrier = [0] * 6
        self.epoch, self.seen = 0, [0] * 6

    def step(self, op: _Op, env: dict) -> None:
        p = op.pipe
        clock = self.clocks[p]
        if self.seen[p] != self.epoch:
            for i, c in enumerate(self.barrier):
                if c > clock[i]:
                    clock[i] = c
            self.seen[p] = self.epoch
        clock[p] += 1
        kind = op.kind
        if kind == SET or kind == WAIT:
            key = op.flag if op.flag_id is None else (*op.flag, op.flag_id(env))
            if kind == SET:
                self.flags.setdefault(key, deque()).append(tuple(clock))
            else:
                queue = self.flags.get(key)
                if not queue:
                    raise NpuSyncError(f"{op.where(tuple(env.items()))} waits for a flag that no set_flag "
                                       f"before it sets: the pipe would wait forever")
                for i, c in enumerate(queue.popleft()):
                    if c > clock[i]:
                        clock[i] = c
        elif kind == BARRIER:
            for q in op.barrier:
                for i, c in enumerate(self.clocks[q]):
                    if c > self.barrier[i]:
                        self.barrier[i] = c
            self.epoch += 1
        for acc in op.accesses:
            if acc.space in self.tracked:
                self._access(op, acc, env, clock)
            if acc.space in self.cross:
                self.gm_accesses[acc.space].append((env[BLOCK_VAR], acc.write, acc.start(env), acc, op,
                                                    tuple(env.items())))

    def _access(self, op: _Op, acc: _Access, env: dict, clock: list[int]) -> None:
        p, write = op.pipe, acc.write
        lo = acc.start(env)
        hi = lo + acc.span
        records = self.records[acc.space]
        for rec in records:
            r_lo, r_hi, r_pipe, r_seq, r_write = rec[0], rec[1], rec[2], rec[3], rec[4]
            if r_hi <= lo or r_lo >= hi or r_pipe == p or not (write or r_write) or clock[r_pipe] >= r_seq:
                continue
            if _overlap(acc, lo, rec[5], r_lo):
                self._race(op, acc, env, lo, rec)
        if acc.dense:
            if write:
                records[:] = [r for r in records if not (lo <= r[0] and r[1] <= hi)]
            else:
                records[:] = [r for r in records if r[4] or r[2] != p or not (lo <= r[0] and r[1] <= hi)]
        records.append((lo, hi, p, clock[p], write, acc, op, tuple(env.items())))
        if len(records) > PRUNE_AT:
            pipes = self.tracked[acc.space]
            records[:] = [r for r in records
                          if any(self.clocks[q][r[2]] < r[3] for q in pipes if q != r[2])]

    def _race(self, op: _Op, acc: _Access, env: dict, lo: int, rec: tuple) -> None:
        what = "writes" if acc.write else "reads"
        other = "writes" if rec[4] else "reads"
        raise NpuRaceError(
            f"race in {acc.space}: {PIPE_NAMES[op.pipe]} {what} bytes {lo}..{lo + acc.span - 1} at "
            f"{op.where(tuple(env.items()))}, and {PIPE_NAMES[rec[2]]} {other} bytes {rec[0]}..{rec[1] - 1} at "
            f"{rec[6].where(rec[7])}, with no flag or barrier ordering them")

    def end_block(self, env: dict) -> None:
        left = {key: len(q) for key, q in self.flags.items() if q}
        if left:
            raise NpuSyncError(f"block {env[BLOCK_VAR]} ends with flags still set: {_flag_names(left)}")
        self.reset()

    def cross_block(self) -> None:
        """Blocks cannot synchronise: no two may touch the same GM bytes, one writing."""
        for space, accesses in self.gm_accesses.items():
            runs = []
            for block, write, lo, acc, op, it in accesses:
                starts = acc.starts(lo)
                runs.append((np.full(len(starts), block), np.full(len(starts), write), starts, starts + acc.run))
            if not runs:
                continue
            block, write, start, end = (np.concatenate(x) for x in zip(*runs))
            hit = _cross_overlap(block, write, start, end)
            if hit is not None:
                self._cross_race(space, accesses, *hit)

    def _cross_race(self, space: str, accesses, byte: int, b1: int, b2: int) -> None:
        def find(block):
            for blk, write, lo, acc, op, it in accesses:
                if blk == block and np.any((acc.starts(lo) <= byte) & (byte < acc.starts(lo) + acc.run)):
                    return ("writes" if write else "reads"), op.where(it)
            return "touches", "?"  # pragma: no cover

        (w1, at1), (w2, at2) = find(b1), find(b2)
        raise NpuRaceError(f"race in {space} byte {byte}: block {b1} {w1} it at {at1} and block {b2} {w2} it "
                           f"at {at2}; blocks cannot synchronise")


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same bytes."""
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.ones(len(start), bool)
    new[1:] = start[1:] > reach[:-1]
    groups = np.cumsum(new) - 1
    out_end = np.zeros(groups[-1] + 1, np.int64)
    np.maximum.at(out_end, groups, end)
    return start[new], out_end


def _cross_overlap(block, write, start, end) -> tuple[int, int, int] | None:
    """(byte, block, other block) of the first GM byte two blocks touch, one writing."""
    blocks = np.unique(block)
    w_start, w_end, w_block = [], [], []
    for b in blocks:
        sel = (block == b) & write
        if sel.any():
            s, e = _union(start[sel], end[sel])
            w_start.append(s), w_end.append(e), w_block.append(np.full(len(s), b))
    if not w_start:
        return None
    ws, we, wb = np.concatenate(w_start), np.concatenate(w_end), np.concatenate(w_block)
    order = np.argsort(ws, kind="stable")
    ws, we, wb = ws[order], we[order], wb[order]
    reach = np.maximum.accumulate(we)
    clash = np.nonzero(ws[1:] < reach[:-1])[0]
    if len(clash):
        i = clash[0] + 1
        j = int(np.nonzero(we[:i] > ws[i])[0][0])
        return int(ws[i]), int(wb[j]), int(wb[i])
    for b in blocks:  # writes are now disjoint: each byte has one writer
        sel = (block == b) & ~write
        others = wb != b
        if not sel.any() or not others.any():
            continue
        os_, oe = ws[others], we[others]
        rs, re = start[sel], end[sel]
        idx = np.searchsorted(oe, rs, side="right")  # first other write ending after the read starts
        inside = idx < len(os_)
        hit = inside & (os_[np.minimum(idx, len(os_) - 1)] < re)
        if hit.any():
            k = int(np.nonzero(hit)[0][0])
            byte = max(int(rs[k]), int(os_[idx[k]]))
            return byte, int(wb[others][idx[k]]), int(b)
    return None


def _flag_names(left: Mapping[tuple, int]) -> str:
    return ", ".join(f"{PIPE_NAMES[k[0]]} -> {PIPE_NAMES[k[1]]} #{k[2]} (x{n})" for k, n in sorted(left.items()))


def _walk(body: list[_Op]):
    for op in body:
        if op.kind == LOOP:
            yield from _walk(op.body)
        else:
            yield op


def _execute(body: list[_Op], env: dict, mem: dict | None, races: _Races | None) -> None:
    for op in body:
        if op.kind == LOOP:
            name = op.var
            for i in range(op.trip):
                env[name] = i
                _execute(op.body, env, mem, races)
            del env[name]
            continue
        if races is not None:
            races.step(op, env)
        if mem is not None and op.run is not None:
            op.run(env, mem)

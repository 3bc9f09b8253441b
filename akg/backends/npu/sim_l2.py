"""The NPU simulator's L2 model: per wave of blocks and per GM DMA, the part of its bytes that
the shared L2 serves (read in common by the wave's blocks, or by the previous wave while its
footprint fits) and the part that goes to HBM, from the DMAs' affine addresses (`_GmOp`, made by
`sim_compile`). Used by `akg.backends.npu.sim`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from akg.backends.npu.operands import BLOCK_VAR
from akg.backends.npu.spec import NpuSpec

if TYPE_CHECKING:
    from akg.backends.npu.sim_compile import _Access, _Compiler, _Op


# --- the L2 ------------------------------------------------------------------------------------

UNION_LIMIT = 1 << 20  # runs x distinct block offsets counted exactly; beyond, from the regions' hulls
MIDDLE_SAMPLES = 8  # full waves after the first, sampled for their mean L2 fractions


@dataclass
class _GmOp:
    """A GM DMA of the program: its path, direction, dynamic count per block, bytes, its GM
    region (`acc`, relative to the instance's start) and the bytes its address moves per unit
    of each block variable."""

    op: _Op
    path: str
    write: bool
    mult: int
    nbytes: int
    acc: _Access
    terms: tuple[tuple[str, int], ...]
    _rel: np.ndarray | None = None

    @property
    def rel(self) -> np.ndarray:
        """Sorted start bytes of the region's runs, relative to its first (empty: too many to
        count)."""
        if self._rel is None:
            many = math.prod(n for n, _ in self.acc.dims) > UNION_LIMIT
            self._rel = np.zeros(0, np.int64) if many else np.sort(self.acc.starts(0), kind="stable")
        return self._rel


def _covered(starts: np.ndarray, run: int) -> int:
    """Bytes covered by runs of `run` bytes at sorted `starts`."""
    return run + int(np.minimum(np.diff(starts), run).sum())


def _union_bytes(g: _GmOp, offsets: np.ndarray | None, cache: dict) -> int:
    """Bytes covered by one instance of `g`'s region placed at each of the (distinct, sorted)
    block byte offsets (None: one copy): how much of the wave's reads of it is unique."""
    key = (id(g), None if offsets is None else (offsets - offsets[0]).tobytes())
    hit = cache.get(key)
    if hit is not None:
        return hit
    acc, rel, run = g.acc, g.rel, g.acc.run
    copies = 1 if offsets is None else len(offsets)
    if len(rel) == 0 or len(rel) * copies > UNION_LIMIT:
        # too many runs to count: each block's region as its hull, filled as densely as its runs
        density = min(1.0, g.nbytes / acc.span)
        out = int(density * (acc.span if copies == 1 else _covered(offsets, acc.span)))
    else:
        one = (id(g), None)
        if one not in cache:
            cache[one] = _covered(rel, run) if len(rel) > 1 else run
        out = cache[one]
        if copies > 1:
            gaps = np.diff(offsets)
            if gaps.min() >= acc.span:  # the copies' hulls are apart
                out *= copies
            elif len(rel) == 1 or np.diff(rel).min() >= offsets[-1] - offsets[0] + run:
                # each run's copies stay before the next run: the starts come out sorted
                out = _covered((rel[:, None] + offsets[None, :]).ravel(), run)
            else:  # sorted runs, one per copy: a merge
                out = _covered(np.sort((offsets[:, None] + rel[None, :]).ravel(), kind="stable"), run)
    cache[key] = out
    return out


@dataclass
class _WaveL2:
    """The L2 fractions of one wave: per GM DMA (by listing index) the part of its bytes that
    goes to HBM, and the wave's L2 hits per path (all its blocks, every instance)."""

    hbm: dict[int, float]
    hits: dict[str, float]


def _footprint(code: _Compiler, offsets: dict, lo: int, hi: int, cache: dict) -> tuple[dict, dict, int]:
    """The wave of blocks lo..hi-1: per GM DMA its distinct block offsets and the unique bytes
    of one instance over the wave, and the wave's footprint (unique bytes of every instance)."""
    key = ("wave", lo, hi)
    if key not in cache:
        distinct, unique = {}, {}
        for g in code.gm_ops:
            d = np.unique(offsets[id(g)][lo:hi]) if g.terms else None
            distinct[id(g)] = d
            if g.write and d is not None:  # blocks write disjoint bytes (else they race)
                unique[id(g)] = len(d) * _union_bytes(g, None, cache)
            else:
                unique[id(g)] = _union_bytes(g, d, cache)
        cache[key] = distinct, unique, sum(unique[id(g)] * g.mult for g in code.gm_ops)
    return cache[key]


def _wave_l2(code: _Compiler, spec: NpuSpec, offsets: dict, lo: int, hi: int, prev: tuple | None,
             cache: dict) -> _WaveL2:
    """The L2 model of the wave of blocks lo..hi-1 (docs/npu.md, "The L2"); `prev` is the
    previous wave's (lo, hi)."""
    size, l2 = hi - lo, spec.l2_bytes
    distinct, unique, _ = _footprint(code, offsets, lo, hi, cache)
    h_cross = 0.0
    if prev is not None and l2 > 0:
        p_distinct, p_unique, p_footprint = _footprint(code, offsets, *prev, cache)
        h_cross = min(1.0, l2 / p_footprint) if p_footprint > 0 else 0.0
    hbm, hits = {}, {}
    for g in code.gm_ops:
        if g.write:
            continue
        total, u = size * g.nbytes, unique[id(g)]
        h_in = min(1.0, l2 / u) if l2 > 0 and u > 0 else 0.0
        hit = h_in * max(0, total - u)
        if h_cross > 0:
            d, dp = distinct[id(g)], p_distinct[id(g)]
            # bytes of this wave's instance that the previous wave's instance read too
            resident = u if d is None else u + p_unique[id(g)] - _union_bytes(g, np.union1d(d, dp), cache)
            hit += h_cross * max(0, resident)
        hit = min(hit, total)
        hbm[g.op.index] = round(1.0 - hit / total, 4) if total else 1.0
        hits[g.path] = hits.get(g.path, 0.0) + hit * g.mult
    return _WaveL2(hbm, hits)


def _block_offsets(code: _Compiler) -> dict:
    """Per GM DMA, the byte offset the block variables add to its address, for every block."""
    program = code.program
    block = np.arange(program.blocks, dtype=np.int64)
    env = {BLOCK_VAR: block}
    rest = block
    for i in reversed(range(len(program.grid))):
        rest, env[f"{BLOCK_VAR}{i}"] = np.divmod(rest, program.grid[i])
    zero = np.zeros(program.blocks, np.int64)
    return {id(g): sum((c * env[v] for v, c in g.terms), zero) for g in code.gm_ops}


def _l2_waves(code: _Compiler, spec: NpuSpec) -> list[tuple[int, int, _WaveL2]]:
    """The waves as (count, blocks, L2 fractions): the first full wave, the later full waves
    (at the mean of up to MIDDLE_SAMPLES of them), the last smaller wave."""
    blocks, cores = code.program.blocks, spec.cores
    full, rest = divmod(blocks, cores)
    offsets, cache = _block_offsets(code), {}
    groups = []

    def at(w, prev_w):
        prev = None if prev_w is None else (prev_w * cores, min(prev_w * cores + cores, blocks))
        return _wave_l2(code, spec, offsets, w * cores, min(w * cores + cores, blocks), prev, cache)

    if full:
        groups.append((1, cores, at(0, None)))
    if full > 1:
        n = full - 1
        picks = sorted({1 + round(i * (n - 1) / max(1, MIDDLE_SAMPLES - 1)) for i in range(min(n, MIDDLE_SAMPLES))})
        samples = [at(w, w - 1) for w in picks]
        hbm = {i: round(sum(s.hbm[i] for s in samples) / len(samples), 4) for i in samples[0].hbm}
        hits = {p: sum(s.hits.get(p, 0.0) for s in samples) / len(samples)
                for p in {p for s in samples for p in s.hits}}
        groups.append((n, cores, _WaveL2(hbm, hits)))
    if rest:
        groups.append((1, rest, at(full, full - 1 if full else None)))
    return groups

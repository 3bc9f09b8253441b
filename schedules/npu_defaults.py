"""The NPU recipe's heuristic for vector bands: the default UB tile of a band (the larger of
what a rough estimate, every tensor twice in half the UB, and a footprint model of the tensors,
their ping-pong halves and the statements' temps allow) and the blocks its tile loop is split
into. Cube and convolution bands are sized in `akg.schedules.npu_cube` and `npu_conv`."""

from __future__ import annotations

import math

import numpy as np

from akg.polyhedral.bands import BandInfo
from akg.schedules.npu_band import block_member, divisors

UB_FILL = 0.5  # fraction of the (per-buffer) UB budget the estimate may fill: temporaries
# calls that are one vector instruction each (the footprint model counts one temp per call)
SIMPLE_CALLS = frozenset({"add", "sub", "mul", "div", "max", "min", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
                          "relu"})
FOOTPRINT_FILL = 0.85  # fraction of the UB the footprint model may fill (padding, reduction partials)


def _statement_ops(ops: list, statements) -> list:
    """The program ops of a band's statements (`S<i>`, `S<i>_init`); other names are skipped."""
    picked = []
    for name in statements:
        base = name.removesuffix("_init")
        if base.startswith("S") and base[1:].isdigit() and int(base[1:]) < len(ops):
            picked.append(ops[int(base[1:])])
    return picked


def _rows_reduced(red, axes) -> bool:
    """Does a reduction sum rows: in every tensor it loads, the dims its reduced axes index
    come after those its output axes index (a softmax's or layer norm's row, not a channel
    summed across images)?"""
    from akg.graph.compute.expr import Var, loads, walk

    summed = {id(a) for a in red.axes}
    kept = {id(a) for a in axes}
    for ld in loads(red.source):
        dims_s, dims_k = [], []
        for d, idx in enumerate(ld.indices):
            used = {id(v) for v in walk(idx) if isinstance(v, Var)}
            if used & summed:
                dims_s.append(d)
            if used & kept:
                dims_k.append(d)
        if dims_s and dims_k and max(dims_k) >= min(dims_s):
            return False
    return True


def _point_bytes(program, info: BandInfo) -> tuple[float, float]:
    """Estimated UB bytes per point of the band: each tensor of the kernel spread over the
    band's points (a tensor smaller than the band, e.g. a bias, counted whole)."""
    points = math.prod(info.extents)
    total, whole = 0.0, 0.0
    tensors = [] if program is None else _band_tensors(program, info)
    for t in tensors:
        n = int(np.prod(t.shape, dtype=np.int64)) * max(np.dtype(t.dtype).itemsize, 2)
        if n >= points:
            total += n / points
        else:
            whole += n
    return 2 * total + 1, whole  # x2: temporaries of the vector expressions


def _budget(spec, buffers: int) -> float:
    return spec.ub_usable_bytes * UB_FILL / buffers


def fit_tile(program, spec, info: BandInfo, buffers: int) -> tuple[int, ...]:
    """The largest tile (outer members first shrunk, inner ones kept whole as long as
    possible) whose estimated footprint fits the UB budget: the larger of the tiles that
    the rough estimate (`_point_bytes`: every tensor twice, half the UB) and the footprint
    model (`_footprint`: tensors, their ping-pong halves and the statements' temps) allow."""
    per_point, whole = _point_bytes(program, info)
    rough = _fit(program, info, per_point, max(_budget(spec, buffers) - whole, 1024))
    per_point, whole = _footprint(program, info, buffers)
    modelled = _fit(program, info, per_point, spec.ub_usable_bytes * FOOTPRINT_FILL - whole)
    if math.prod(modelled) <= math.prod(rough):
        return rough
    # a larger tile only where it keeps the AI cores as busy (as many blocks, up to the cores)
    cores = spec.cores

    def blocks(tile):
        d = block_member(info, tile, cores)
        return min(cores, info.extents[d] // tile[d]) if info.coincident and info.coincident[d] else 1
    return modelled if blocks(modelled) >= blocks(rough) else rough


def _footprint(program, info: BandInfo, buffers: int) -> tuple[float, float]:
    """(UB bytes per band point, bytes independent of the tile) of a vector band as the
    backend lays it out: each tensor of the band per point, in `buffers` ping-pong halves
    when it comes from or goes to GM (a tensor another statement of the band reads stays
    in UB, single), plus the temps of the statement that needs the most (each call or cast
    below a statement's root, each distinct one once, at the statement's elements per point:
    a reduction's summed elements included)."""
    from akg.graph.compute.expr import Call, Cast, Load, Reduce, Select, loads

    if program is None:
        return math.inf, 0.0
    points = math.prod(info.extents)
    ops = program.ops()
    picked = _statement_ops(ops, info.statements)
    if not picked:
        return math.inf, 0.0
    read = {id(ld.tensor) for op in picked for ld in loads(op.body)}
    total, whole = 0.0, 0.0
    for t in _band_tensors(program, info):
        n = int(np.prod(t.shape, dtype=np.int64)) * max(np.dtype(t.dtype).itemsize, 2)
        local = t.op is not None and id(t) in read
        k = 1 if local else buffers
        if n >= points:
            total += k * n / points
        else:
            whole += k * n
    temps = 0.0
    for op in picked:
        body = op.body
        elems = math.prod(int(a.extent) for a in op.axes)
        if isinstance(body, Select) or isinstance(body, Call) and body.op not in SIMPLE_CALLS:
            return math.inf, 0.0
        if isinstance(body, Reduce):
            if not _rows_reduced(body, op.axes):
                return math.inf, 0.0  # not a row reduction: its mapping's partials are not modelled
            elems *= math.prod(int(a.extent) for a in body.axes)
            roots = [body.source]  # the source is evaluated into a temp, then reduced
        else:
            roots = [c for c in ((body.args if isinstance(body, Call) else (body.value,) if isinstance(body, Cast)
                                  else (body.cond, body.a, body.b) if isinstance(body, Select) else ()))]
        seen, stack = {}, list(roots)
        while stack:
            e = stack.pop()
            if isinstance(e, Select) or isinstance(e, Call) and e.op not in SIMPLE_CALLS:
                return math.inf, 0.0  # expansions and selects take temps of their own: not modelled
            if isinstance(e, Load) or not isinstance(e, (Call, Cast, Select)):
                continue
            seen.setdefault(repr(e), max(np.dtype(e.dtype).itemsize, 2))
            stack.extend(e.args if isinstance(e, Call) else (e.value,) if isinstance(e, Cast)
                         else (e.cond, e.a, e.b))
        temps = max(temps, sum(seen.values()) * elems / points)
    return total + temps, whole


def _fit(program, info: BandInfo, per_point: float, budget: float) -> tuple[int, ...]:
    tile = list(info.extents)
    # members that may be a tensor's innermost (UB-padded) dim are shrunk last: a tile of
    # a few elements along it pads every row to a 32-byte block
    inner = _inner_extents(program)
    divided = _divided_extents(program)
    order = sorted(range(info.members), key=lambda d: info.extents[d] in inner and
                   any(info.extents[e] not in inner for e in range(info.members)))
    for d in order:
        if math.prod(tile) * per_point <= budget:
            break
        if not info.permutable and info.members > 1:
            break
        rest = math.prod(tile) // tile[d]
        fits = [t for t in divisors(info.extents[d]) if t * rest * per_point <= budget]
        # a tile that divides each reshape divisor of this extent, or is a multiple of it,
        # keeps `i // d` and `i % d` affine in the tile's loops (the backend splits a tile
        # loop at d); one that straddles d is refused
        cuts = divided.get(info.extents[d], ())
        tile[d] = max(fits, key=lambda t: (all(t % c == 0 or c % t == 0 for c in cuts), t)) if fits else 1
    return tuple(tile)


def _divided_extents(program) -> dict[int, set[int]]:
    """{extent: divisors} of the index divisions `i // d` and `i % d` (by a constant) in the
    kernel's statements, by the extent of the loop variable divided (a reshape's merged dims:
    `x[i // 64, i % 64]` over i < 6144 gives {6144: {64}})."""
    from akg.graph.compute.expr import Call, Const, Var, walk

    out: dict[int, set[int]] = {}
    if program is None:
        return out
    for op in program.ops():
        for n in walk(op.body):
            if not (isinstance(n, Call) and n.op in ("floordiv", "floormod") and isinstance(n.args[1], Const)):
                continue
            d = int(n.args[1].value)
            for v in walk(n.args[0]):
                if isinstance(v, Var) and 1 < d < v.extent:
                    out.setdefault(v.extent, set()).add(d)
    return out


def _band_tensors(program, info: BandInfo) -> list:
    """The tensors the band's statements read and write (every tensor of the kernel
    when the statements are not known ops): other bands' tensors are not in its tiles."""
    from akg.graph.compute.expr import loads

    ops = program.ops()
    picked = _statement_ops(ops, info.statements)
    if not picked:
        return [*program.placeholders, *(op.output for op in ops)]
    seen, out = set(), []
    for op in picked:
        for t in [op.output, *(ld.tensor for ld in loads(op.body))]:
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
    return out


def _inner_extents(program) -> set:
    """The extents of the tensors' innermost dims of more than one element."""
    out = set()
    if program is None:
        return out
    for t in [*program.placeholders, *(op.output for op in program.ops())]:
        dims = [int(d) for d in t.shape if int(d) > 1]
        if dims:
            out.add(dims[-1])
    return out


def default_blocks(spec, info: BandInfo, tile: tuple[int, ...], n_bands: int) -> int:
    """The blocks a band's tile loop is split into: the most that divide its tiles, up to the
    cores, when it is the only band and its block member is parallel; else 1."""
    d = block_member(info, tile, spec.cores)
    if n_bands > 1 or not info.coincident or not info.coincident[d]:
        return 1
    count = info.extents[d] // tile[d]
    fits = [b for b in divisors(count) if b <= spec.cores]
    return max(fits) if fits else 1

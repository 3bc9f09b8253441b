"""The NPU backend: the TIR that the shared lowering makes of a mapped schedule (tile loops,
the outer parallel loop, `npu.tile` regions marked by the recipe) translated into an
`isa.Program`, and that program run and timed by the simulator ("npu-sim").

Translation (`translate`):
- the outermost parallel loop becomes the program's blocks (one AI core each);
- serial loops outside a tile region become `Loop`s (the innermost one, under double
  buffering, a loop over pairs of tiles with every DMA'd buffer in two ping-pong halves);
- a tile region keeps every tensor it touches in UB: its box (per dim, the span its accesses
  reach for one iteration of the loops around the region) is a UB buffer (last dim padded to
  a 32-byte block), brought in by a GM->UB DMA where the region reads before it writes, and
  written back by a UB->GM DMA where it writes a kernel output (or an intermediate another
  region reads, kept in a GM workspace); intermediates used in one region only live in UB;
- each statement's loop nest becomes vector instructions along the loop its destination is
  contiguous in (merged with outer loops where every operand stays contiguous; repeats of
  256 bytes, the tail by mask), operands invariant along it as broadcasts, the other loops as
  `Loop`s; a statement whose destination is invariant along its innermost loop is a
  reduction: its source computed into a temporary, folded across repeats
  (`reduce_*_across`), the tail by mask, then within the repeat (`reduce_*`) and combined
  with the accumulator;
- `set_flag`/`wait_flag` pairs are inserted exactly where a buffer written or read on one
  pipe is next touched on another (`insert_syncs`): within an iteration, and across
  iterations of a loop with flags set before the loop and waited for after it.

What it cannot map yet raises `CompileError` naming the statement and the reason."""

from __future__ import annotations

import contextvars
import math
import pickle
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from akg.errors import CompileError
from akg.target import Artifact, Backend, HostArrays
from akg.backends.npu.reuse import drop_recomputed, fold_initial_values
from akg.backends.npu.rowblocks import block_reduce, block_reduce_cost, block_rows_cost, block_rows_op

ARTIFACT_KIND = "npu-sim"
NPU_DTYPES = ("float16", "float32", "int32")
BOOL_AS = "float16"  # a bool tensor lives in GM and UB as float16 0 / 1 (the kernel's edge converts)


def _npu_dtype(dtype) -> str:
    dtype = str(dtype)
    return BOOL_AS if dtype == "bool" else dtype


class NpuMappingError(CompileError):
    """A kernel (statement) the NPU backend cannot map yet."""


class NpuCubePrecisionError(NpuMappingError):
    """An fp32 contraction too large for the vector path: the cube computes in fp16, which
    loses the precision the fp32 reference (rtol 1e-5) asks for."""


# --- affine index expressions --------------------------------------------------------------------


def _affine(e, where: str) -> tuple[dict, int]:
    """TIR integer expression -> ({Var: coeff}, const)."""
    from tvm import tirx

    if isinstance(e, tirx.IntImm):
        return {}, int(e.value)
    if isinstance(e, tirx.Var):
        split = (_LOOP_SPLITS.get() or {}).get(e)
        if split is not None:  # a loop split in two or reversed (`_split_divided_loops`)
            (coeffs, const), _loops = split
            return dict(coeffs), const
        return {e: 1}, 0
    if isinstance(e, (tirx.Add, tirx.Sub)):
        (ca, ka), (cb, kb) = _affine(e.a, where), _affine(e.b, where)
        sign = 1 if isinstance(e, tirx.Add) else -1
        out = dict(ca)
        for v, c in cb.items():
            out[v] = out.get(v, 0) + sign * c
        return {v: c for v, c in out.items() if c}, ka + sign * kb
    if isinstance(e, tirx.Mul):
        (ca, ka), (cb, kb) = _affine(e.a, where), _affine(e.b, where)
        if ca and cb:
            raise NpuMappingError(f"{where}: index {e} is not affine")
        if ca:
            return {v: c * kb for v, c in ca.items() if c * kb}, ka * kb
        return {v: c * ka for v, c in cb.items() if c * ka}, ka * kb
    if isinstance(e, (tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod)) and isinstance(e.b, tirx.IntImm) \
            and int(e.b.value) > 0:
        return _divided(e, _affine(e.a, where), int(e.b.value), where)
    raise NpuMappingError(f"{where}: index {e} is not affine in the loops (not supported yet)")


# the extents of the loops of the function being translated (Var -> extent), from its parse
_LOOP_RANGES: contextvars.ContextVar = contextvars.ContextVar("npu_loop_ranges", default=None)
# its region loops rewritten (Var -> ((coeffs, const), [(new Var, extent), ...])): split in two,
# v = outer * k + inner, or reversed, v = (extent - 1) - v_r
_LOOP_SPLITS: contextvars.ContextVar = contextvars.ContextVar("npu_loop_splits", default=None)


# tensors of a region read or written through a reshape of merged dims whose address is affine
# (`x[c // 25, c // 5 % 5, c % 5]` is element c of x): tensor name -> [(indices, address)]
_FLATS: contextvars.ContextVar = contextvars.ContextVar("npu_flats", default=None)


def _flat_address(acc):
    """The affine address expression of an access recorded in `_FLATS`, or None."""
    flats = _FLATS.get() or {}
    for indices, address in flats.get(_buf(acc).name, ()):
        if len(indices) == len(acc.indices) and all(a.same_as(b) for a, b in zip(indices, acc.indices)):
            return address
    return None


def _access_forms(acc, where: str) -> list:
    """The affine forms of an access's indices; a flattened tensor's (`_FLATS`) one form, its
    address."""
    address = _flat_address(acc)
    if address is not None:
        return [_affine(address, where)]
    return [_affine(i, where) for i in acc.indices]


def _find_flats(nests, where: str) -> None:
    """Record in `_FLATS` the tensors of a region whose accesses divide a loop by several
    divisors (a merged loop of three or more dims) but whose addresses (row-major, simplified
    over the loops' ranges) are affine in every access: a reshape's merged dims read as the
    flat range they are (`out[b, c // 25, c // 5 % 5, c % 5]` is `out[b * 400 + c]`), one dim
    in UB, no loop split."""
    flats = _FLATS.get()
    if flats is None:
        return
    accesses = defaultdict(list)
    for nest in nests:
        for acc in [nest.store, *_loads(nest.store.value)]:
            accesses[_buf(acc).name].append(acc)
    analyzer = None
    for name, accs in accesses.items():
        divisors = defaultdict(set)  # loop var name -> the divisors of the dividends it is in
        for div in (d for a in accs for i in a.indices for d in _divisions(i)):
            for v in _index_vars(div.a):
                divisors[v].add(int(div.b.value))
        if not any(len(ds) > 1 for ds in divisors.values()):
            continue  # one divisor per loop: split at it (`_split_divided_loops`)
        analyzer = analyzer or _ranged_analyzer()
        if analyzer is None:
            return
        found = []
        for a in accs:
            shape = [int(n) for n in _buf(a).shape]
            address, stride = 0, 1
            for idx, n in reversed(list(zip(a.indices, shape))):
                address = address + idx * stride if stride != 1 else address + idx
                stride *= n
            address = analyzer.simplify(address)
            if _divisions(address):
                break
            try:
                _affine(address, where)
            except NpuMappingError:
                break
            found.append((a.indices, address))
        else:
            flats.setdefault(name, []).extend(found)


def _index_vars(e) -> set:
    """The names of the variables in an index expression."""
    from tvm import tirx

    if isinstance(e, tirx.Var):
        return {e.name}
    out = set()
    for name in ("a", "b"):
        if hasattr(e, name):
            out |= _index_vars(getattr(e, name))
    return out


def _divided_terms(accesses, where: str):
    """(coefficients of the dividend, divisor) of each affine floordiv / floormod in the
    accesses' indices (those whose dividend is not affine are skipped; flattened accesses
    have none)."""
    for acc in accesses:
        if _flat_address(acc) is not None:
            continue
        for div in (d for idx in acc.indices for d in _divisions(idx)):
            try:
                coeffs, _k = _affine(div.a, where)
            except NpuMappingError:
                continue
            yield coeffs, int(div.b.value)


def _divisions(e) -> list:
    """The integer divisions and remainders (by a constant) in an index expression."""
    from tvm import tirx

    if isinstance(e, (tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod)):
        found = [e] if isinstance(e.b, tirx.IntImm) and int(e.b.value) > 0 else []
        return found + _divisions(e.a)
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul)):
        return _divisions(e.a) + _divisions(e.b)
    return []


def _split_divided_loops(items: list, where: str) -> list:
    """Split the region loops that an index divides (the merged dims of a reshape, `input[c3 //
    128, c3 % 128]` over c3 < 2048) at the divisor: c3 = 128 * c3_o + c3_i, so that the
    quotient and the remainder are the two new loops and every index is affine again. A loop
    is split by d / gcd(c, d) for a division by d of c * v + ..., when that divides its
    extent; loops of `Serial` items stay whole."""
    import math

    from tvm import tirx

    nests = list(_nests(items))
    _find_flats(nests, where)
    serial = []

    def serial_vars(xs):
        for it in xs:
            if isinstance(it, Serial):
                serial.append(it.var)
                serial_vars(it.items)

    serial_vars(items)
    factors, extents, cuts = {}, {}, defaultdict(set)
    for nest in nests:
        ext = dict(nest.loops)
        for coeffs, d in _divided_terms([nest.store, *_loads(nest.store.value)], where):
            for v, c in coeffs.items():
                if v not in ext or not c % d or any(v.same_as(w) for w in serial):
                    continue
                k = d // math.gcd(abs(c), d)
                factor = math.lcm(factors.get(v, 1), k)
                if 1 < factor < ext[v] and ext[v] % factor == 0:
                    factors[v], extents[v] = factor, ext[v]
                    cuts[v].add(k)
    reversed_ = _reversed_loops(nests, serial, where)
    if not factors and not reversed_:
        return items
    splits, ranges = _LOOP_SPLITS.get(), _LOOP_RANGES.get()
    if splits is None or ranges is None:
        return items
    for v, k in factors.items():
        # divisors that nest (5 | 25 | 400: `c // 25`, `c // 5 % 5`, `c % 5`, a merged loop of
        # three dims) split the loop at each: c = 25 c_o + 5 c_m + c_i
        chain = sorted(cuts[v])
        if len(chain) > 1 and chain[-1] == k and all(b % a == 0 for a, b in zip(chain, chain[1:])):
            sizes = [extents[v] // k] + [b // a for a, b in zip(chain, chain[1:])][::-1] + [chain[0]]
            names = [f"{v.name}_o"] + [f"{v.name}_m{n}" for n in range(len(sizes) - 2)] + [f"{v.name}_i"]
            new = [tirx.Var(n, "int32") for n in names]
            strides = [k] + list(reversed(chain[:-1])) + [1]
            splits[v] = (({w: st for w, st in zip(new, strides)}, 0), list(zip(new, sizes)))
            for w, n in zip(new, sizes):
                ranges[w] = n
            continue
        outer, inner = tirx.Var(f"{v.name}_o", "int32"), tirx.Var(f"{v.name}_i", "int32")
        splits[v] = (({outer: k, inner: 1}, 0), [(outer, extents[v] // k), (inner, k)])
        ranges[outer], ranges[inner] = extents[v] // k, k
    for v, e in reversed_.items():
        if v not in splits:
            back = tirx.Var(f"{v.name}_r", "int32")
            splits[v] = (({back: -1}, e - 1), [(back, e)])
            ranges[back] = e
    for nest in nests:
        loops = []
        for v, e in nest.loops:
            loops += splits[v][1] if v in splits else [(v, e)]
        nest.loops = loops
    return items


def _split_divided_top_loop(loop, extent: int, where: str):
    """A serial tile loop that an index below divides past the divisor (`x[c1 // 16, c1 % 16 *
    3 + c2]` over c1 < 48, a reshape's merged dim that the tile did not split at 16) is split
    at the divisor as `_split_divided_loops` splits region loops: c1 = 16 c1_o + c1_i, two
    nested tile loops, so that every index is affine again (a core loop becomes a block grid
    of two axes). The split is recorded before the body is parsed; returns ((outer, extent),
    (inner, extent)) or None."""
    import math

    from tvm import tirx

    def stores(stmt):
        for x in _seq(stmt):
            if isinstance(x, (tirx.For, tirx.AttrStmt)):
                yield from stores(x.body)
            elif isinstance(x, tirx.BufferStore):
                yield x

    v, factor = loop.loop_var, 1
    for st in stores(loop.body):
        for coeffs, d in _divided_terms([st, *_loads(st.value)], where):
            c = next((c for w, c in coeffs.items() if w.same_as(v)), 0)
            if c % d:
                factor = math.lcm(factor, d // math.gcd(abs(c), d))
    splits, ranges = _LOOP_SPLITS.get(), _LOOP_RANGES.get()
    if not 1 < factor < extent or extent % factor or splits is None or ranges is None or v in splits:
        return None
    outer, inner = tirx.Var(f"{v.name}_o", "int32"), tirx.Var(f"{v.name}_i", "int32")
    splits[v] = (({outer: factor, inner: 1}, 0), [(outer, extent // factor), (inner, factor)])
    ranges[outer], ranges[inner] = extent // factor, factor
    return (outer, extent // factor), (inner, factor)


def _reversed_loops(nests, serial, where: str) -> dict:
    """Loops to run backwards (Var -> extent): those of element-wise statements whose every
    access walks them downwards (`x_1[i, 63 - c] = x[i, 63 - c]`, a schedule's reversed loop),
    so that the vector instructions see ascending addresses. A statement's loop order does not
    matter when its destination moves along the loop (no reduction over it)."""
    found, refused = {}, []
    for nest in nests:
        for v, e in nest.loops:
            if e < 2 or any(v.same_as(w) for w in serial):
                continue
            try:
                dst = [_affine(i, where)[0].get(v, 0) for i in nest.store.indices]
                srcs = [_affine(i, where)[0].get(v, 0) for l in _loads(nest.store.value) for i in l.indices]
            except NpuMappingError:
                refused.append(v)
                continue
            reads_dst = any(l.source.same_as(nest.store.buffer) for l in _loads(nest.store.value))
            if any(c < 0 for c in dst) and all(c <= 0 for c in dst + srcs) and not reads_dst:
                found[v] = e
            else:
                refused.append(v)
    return {v: e for v, e in found.items() if not any(v.same_as(w) for w in refused)}


def _divided(e, form: tuple[dict, int], d: int, where: str) -> tuple[dict, int]:
    """`a // d` or `a % d` of an affine `a` (the floordiv / mod of a reshape's indices) as an
    affine form where the loops' ranges make it one: a = d * q + r with q, r affine (each
    coefficient and the constant split by divmod) and r in [0, d) for every loop value, so
    a // d = q and a % d = r. `(16 * i + j) // 16` is i for j < 16; `i // 16` over i < 256 is
    refused (not affine: the loop would have to be split at multiples of 16)."""
    from tvm import tirx

    coeffs, const = form
    ranges = _LOOP_RANGES.get() or {}
    if any(v not in ranges for v in coeffs):
        raise NpuMappingError(f"{where}: index {e} divides a loop of unknown range (not supported)")
    if isinstance(e, (tirx.Div, tirx.Mod)) and const + sum(min(0, c * (ranges[v] - 1)) for v, c in coeffs.items()) < 0:
        raise NpuMappingError(f"{where}: index {e} truncates a negative value (not supported)")
    qk, rk = divmod(const, d)
    quotient = {v: c // d for v, c in coeffs.items() if c // d}
    remainder = {v: c % d for v, c in coeffs.items() if c % d}
    top = rk + sum(c * (ranges[v] - 1) for v, c in remainder.items())
    floor = isinstance(e, (tirx.FloorDiv, tirx.Div))
    if top >= d:
        # affine on the loops' ranges all the same (`(24 * i + 24) // 25` is i for i < 25, a
        # schedule's form of a merged loop): the values fitted and checked at every point
        fit = _affine_on_ranges(remainder, rk, d, {v: ranges[v] for v in remainder}, floor)
        if fit is not None:
            fc, fk = fit
            if not floor:
                return fc, fk
            merged = dict(quotient)
            for v, c in fc.items():
                merged[v] = merged.get(v, 0) + c
            return {v: c for v, c in merged.items() if c}, qk + fk
        raise NpuMappingError(f"{where}: index {e} is not affine in the loops (its remainder spans {rk}..{top}, past "
                              f"{d}: a tile that splits the divided loop at multiples of {d} would make it affine)")
    return (quotient, qk) if floor else (remainder, rk)


def _bounds_test(cond, forms: list, where: str):
    """{dim: (lo, hi)}: the bounds `lo <= forms[dim] < hi` that `cond` (a conjunction of
    comparisons of the forms with constants) tests; None when it tests anything else."""
    from tvm import tirx

    out: dict = {}
    terms, stack = [], [cond]
    while stack:
        c = stack.pop()
        if type(c).__name__ == "And":
            stack += [c.a, c.b]
        else:
            terms.append(c)
    for t in terms:
        kind = type(t).__name__
        if kind not in ("GE", "GT", "LE", "LT"):
            return None
        a, b = t.a, t.b
        if isinstance(a, tirx.IntImm) and not isinstance(b, tirx.IntImm):
            a, b = b, a
            kind = {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT"}[kind]
        if not isinstance(b, tirx.IntImm):
            return None
        try:
            form = _affine(a, where)
        except NpuMappingError:
            return None
        n = int(b.value)
        dims = [d for d, f in enumerate(forms) if _same_coeffs(f[0], form[0])]
        if len(dims) != 1:
            return None
        d = dims[0]
        shift = forms[d][1] - form[1]  # forms[d] = form + shift
        lo, hi = out.get(d, (-math.inf, math.inf))
        if kind == "GE":
            lo = max(lo, n + shift)
        elif kind == "GT":
            lo = max(lo, n + 1 + shift)
        elif kind == "LT":
            hi = min(hi, n + shift)
        else:
            hi = min(hi, n + 1 + shift)
        out[d] = (lo, hi)
    return out


AFFINE_FIT_POINTS = 1 << 16  # the most loop points `_affine_on_ranges` evaluates


def _affine_on_ranges(coeffs: dict, const: int, d: int, ranges: dict, floor: bool):
    """({Var: coeff}, const) of `(const + sum(c v)) // d` (floor) or `% d` when that is an
    affine function of the loops over their ranges (checked at every point), else None."""
    import math

    vs = list(coeffs)
    if not vs or math.prod(ranges[v] for v in vs) > AFFINE_FIT_POINTS:
        return None
    grids = np.meshgrid(*[np.arange(ranges[v], dtype=np.int64) for v in vs], indexing="ij")
    a = const + sum(coeffs[v] * g for v, g in zip(vs, grids))
    vals = a // d if floor else a % d
    base = int(vals.flat[0])
    slopes = {}
    for k, v in enumerate(vs):
        if ranges[v] > 1:
            index = [0] * len(vs)
            index[k] = 1
            slopes[v] = int(vals[tuple(index)]) - base
    fitted = base + sum(slopes.get(v, 0) * g for v, g in zip(vs, grids))
    if not np.array_equal(fitted, vals):
        return None
    return {v: c for v, c in slopes.items() if c}, base


# --- the parsed TIR ---------------------------------------------------------------------------------


@dataclass
class Nest:
    """One statement with the loops (var, extent) of the region around it, outermost first."""

    store: object
    loops: list


@dataclass
class Serial:
    """A region loop that cannot be distributed over its statements."""

    var: object
    extent: int
    items: list


@dataclass
class Region:
    name: str
    items: list


@dataclass
class TopLoop:
    var: object
    extent: int
    parallel: bool
    items: list
    grid: bool = False  # an axis of the program's block grid (`npu.grid`)


def _mark_parts(name: str) -> tuple[int, int]:
    """(buffers, K step) of a tile mark `npu.tile.<band>.<buffers>[.k<kt>]` (K step 0: vector)."""
    parts = name.split(".")
    buffers = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 1
    kt = int(parts[4][1:]) if len(parts) > 4 and parts[4].startswith("k") else 0
    return buffers, kt


def _extent(loop, where: str) -> int:
    """A loop's constant extent (from 0), recorded for the range checks of `_divided` (the
    largest extent when a variable names several loops)."""
    from tvm import tirx

    if not isinstance(loop.min, tirx.IntImm) or int(loop.min.value) != 0 or not isinstance(loop.extent, tirx.IntImm):
        raise NpuMappingError(f"{where}: loop {loop.loop_var} has a bound that is not constant (a partial tile); "
                              f"NPU tiles must divide their loops")
    extent = int(loop.extent.value)
    ranges = _LOOP_RANGES.get()
    if ranges is not None:
        ranges[loop.loop_var] = max(extent, ranges.get(loop.loop_var, 0))
    return extent


def _seq(stmt) -> list:
    from tvm import tirx

    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    return [stmt]


def _parse_top(stmt, name: str) -> list:
    from tvm import tirx

    out = []
    for s in _seq(stmt):
        if isinstance(s, tirx.AllocBuffer) or (isinstance(s, tirx.Evaluate)):
            continue
        if isinstance(s, tirx.For):
            extent, parallel = _extent(s, name), s.kind == tirx.ForKind.PARALLEL
            split = _split_divided_top_loop(s, extent, name)
            body = _parse_top(s.body, name)
            if split is None:
                out.append(TopLoop(s.loop_var, extent, parallel, body))
            else:  # a core loop split in two is a block grid of two axes (block = k c_o + c_i)
                (outer, n_outer), (inner, n_inner) = split
                out.append(TopLoop(outer, n_outer, parallel, [TopLoop(inner, n_inner, parallel, body, grid=parallel)],
                                   grid=parallel))
        elif isinstance(s, tirx.AttrStmt) and s.attr_key == "akg.mark" and str(s.node).startswith("npu.tile"):
            items = _parse_region(s.body, [], name)
            if not _mark_parts(str(s.node))[1]:  # vector regions (the cube maps its own loops)
                items = _split_divided_loops(items, name)
            out.append(Region(str(s.node), items))
        elif isinstance(s, tirx.AttrStmt) and s.attr_key == "akg.mark" and str(s.node).startswith("npu.grid") \
                and isinstance(s.body, tirx.For):
            f = s.body
            out.append(TopLoop(f.loop_var, _extent(f, name), True, _parse_top(f.body, name), grid=True))
        elif isinstance(s, tirx.AttrStmt):
            out.extend(_parse_top(s.body, name))
        elif isinstance(s, tirx.BufferStore):
            out.append(Region("npu.tile.scalar.1", [Nest(s, [])]))  # a statement without loops: n = 1
        else:
            raise NpuMappingError(f"{name}: statement outside the tiled regions (not supported yet): {s}")
    return out


def _parse_region(stmt, loops: list, name: str, parallel: bool = False) -> list:
    """Distribute parallel loops over their statements; a serial loop with several statements
    below becomes a `Serial` item."""
    from tvm import tirx

    out = []
    for s in _seq(stmt):
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "akg.mark":
            out.extend(_parse_region(s.body, loops, name, parallel=str(s.node).startswith("npu.par")))
        elif isinstance(s, tirx.For):
            ext = _extent(s, name)
            if parallel or _single_statement(s.body) or _independent_iterations(s, name):
                out.extend(_parse_region(s.body, loops + [(s.loop_var, ext)], name))
            else:
                out.append(Serial(s.loop_var, ext, _parse_region(s.body, [], name)))
        elif isinstance(s, tirx.BufferStore):
            out.append(Nest(s, list(loops)))
        elif isinstance(s, (tirx.AllocBuffer, tirx.Evaluate)):
            continue
        elif isinstance(s, tirx.IfThenElse):
            raise NpuMappingError(f"{name}: a guarded statement (if {s.condition}) is not supported yet")
        else:
            raise NpuMappingError(f"{name}: {type(s).__name__} in a tile region is not supported yet")
        parallel = False
    return out


def _independent_iterations(loop, where: str) -> bool:
    """Does a loop over several statements carry no dependence, so that it may be distributed
    over them (loop fission, the statements' order kept)? Yes when every tensor written in it
    is accessed at one index only, which moves with the loop: each iteration then reads and
    writes its own elements (an accumulator written at the same element every iteration does
    not qualify)."""
    from tvm import tirx

    stores, loads = [], []

    def collect(stmt) -> bool:
        for x in _seq(stmt):
            if isinstance(x, (tirx.For, tirx.AttrStmt)):
                if not collect(x.body):
                    return False
            elif isinstance(x, tirx.BufferStore):
                stores.append(x)
                loads.extend(_loads(x.value))
            elif not isinstance(x, (tirx.AllocBuffer, tirx.Evaluate)):
                return False
        return True

    if not collect(loop.body):
        return False
    analyzer = None
    for name in {st.buffer.name for st in stores}:
        accesses = [a for a in stores if a.buffer.name == name] + [a for a in loads if a.source.name == name]
        if len({tuple(str(i) for i in a.indices) for a in accesses}) != 1:
            # written as `x[c0 * 3 + c1 // 16, ..]`, read as `x[(c0 * 144 + c1 * 3 + c2) // 48, ..]`
            # (a reshape's two sides): one index when the loops' ranges prove the values equal
            analyzer = analyzer or _ranged_analyzer()
            first = accesses[0].indices
            if analyzer is None or any(len(a.indices) != len(first) or not all(
                    analyzer.can_prove_equal(i, j) for i, j in zip(a.indices, first)) for a in accesses[1:]):
                return False
        forms = None
        for a in accesses:
            try:
                forms = [_affine(i, where)[0] for i in a.indices]
                break
            except NpuMappingError:
                continue
        if forms is None or not any(c and v.same_as(loop.loop_var) for f in forms for v, c in f.items()):
            return False
    return True


def _ranged_analyzer():
    """A TVM arithmetic analyzer that knows the ranges of the loops parsed so far (None when
    they are not recorded)."""
    import tvm
    from tvm.sym.analyzer import Analyzer

    ranges = _LOOP_RANGES.get()
    if ranges is None:
        return None
    analyzer = Analyzer()
    for v, e in ranges.items():
        analyzer.bind(v, tvm.ir.Range.from_min_extent(0, e))
    return analyzer


def _single_statement(stmt) -> bool:
    from tvm import tirx

    items = _seq(stmt)
    if len(items) != 1:
        return False
    s = items[0]
    if isinstance(s, tirx.For):
        return _single_statement(s.body)
    if isinstance(s, tirx.AttrStmt):
        return _single_statement(s.body)
    return isinstance(s, tirx.BufferStore)


def _is_load(e) -> bool:
    return type(e).__name__ == "TensorLoad"


def _buf(access):
    """The buffer a load (`source`) or a store (`buffer`) accesses."""
    return access.source if _is_load(access) else access.buffer


def _dt(e) -> str:
    return str(e.ty.dtype)


def _nonnegative(e) -> bool:
    """Is a value >= 0 by construction: `c ? x : k` with c `x > 0` (or `x >= 0`) and k >= 0
    a constant, max(x, k >= 0), x * x, abs, a non-negative constant?"""
    from tvm import tirx

    name = type(e).__name__
    if isinstance(e, (tirx.FloatImm, tirx.IntImm)):
        return e.value >= 0
    if name == "Max":
        return any(isinstance(x, (tirx.FloatImm, tirx.IntImm)) and x.value >= 0 or _nonnegative(x)
                   for x in (e.a, e.b))
    if name == "Mul":
        return e.a.same_as(e.b) or (_is_load(e.a) and _is_load(e.b) and _key(e.a) == _key(e.b)) or \
            _nonnegative(e.a) and _nonnegative(e.b)
    if name == "Cast":
        return _nonnegative(e.value)
    if name == "Call" and str(e.op.name).split(".")[-1] in ("fabs", "exp", "sqrt"):
        return True
    if name == "Call" and str(e.op.name).endswith("if_then_else") or name == "Select":
        cond, t, f = (e.args if name == "Call" else (e.condition, e.true_value, e.false_value))
        kind = type(cond).__name__
        if kind == "NE" and isinstance(cond.b, (tirx.FloatImm, tirx.IntImm)) and cond.b.value == 0 and \
                type(cond.a).__name__ == "Cast" and type(cond.a.value).__name__ in ("GT", "GE"):
            cond = cond.a.value  # float(x > 0) != 0
            kind = type(cond).__name__

        def same(x, y):
            return x.same_as(y) or _is_load(x) and _is_load(y) and _key(x) == _key(y)

        guard = kind in ("GT", "GE") and isinstance(cond.b, (tirx.FloatImm, tirx.IntImm)) and cond.b.value >= 0 \
            and same(cond.a, t)
        return (guard or _nonnegative(t)) and _nonnegative(f)
    return False


def _nests(items) -> list:
    for it in items:
        if isinstance(it, Nest):
            yield it
        elif isinstance(it, Serial):
            yield from _nests(it.items)


def _loads(expr) -> list:

    found = []

    def visit(e):
        t = type(e).__name__
        if t == "TensorLoad":
            found.append(e)
            return
        if t == "Call":
            for a in e.args:
                visit(a)
            return
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            if hasattr(e, name):
                visit(getattr(e, name))

    visit(expr)
    return found


# --- syncs -----------------------------------------------------------------------------------------


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


# --- translation -----------------------------------------------------------------------------------


@dataclass
class Local:
    """A tensor's UB buffer in one region: its box in the tensor, its padded layout."""

    name: str  # tensor buffer name
    dtype: str
    lo: list  # per dim: ({Var: coeff}, const) of the box's first element
    sizes: list
    strides: list  # UB element strides per dim
    buffer: object = None
    halves: bool = False
    slot_elems: int = 0
    moving: bool = False  # brought in per tile of a tiled reduction loop
    perm: list = None  # the tensor dims in UB order, outer to inner (None: the tensor's own);
    #                    a transposed access gets its transpose in the DMA
    view: "Window" = None  # a window dim unfolded in UB (the box's dims are the view's, `Window`)


@dataclass
class Window:
    """A tensor accessed through windows, strides or merged dims, laid out in UB unfolded: each
    such dim of the tensor, index `y*s + ry*d + k` (a convolution's or a pooling's input; the
    cube takes fp16 convs only) or `25*o + 5*a + b` (a reshape's merged dims whose rows are no
    whole 32-byte blocks), is split into its window loop `ry` (at most one; coefficient `rstep`)
    and one dim per output loop (`parts`: (loop, coefficient), outermost first), the window
    dims outermost: `UB[ry, rx, b, c, y, x] = X[b, c, y*sh + ry*dh + k, x*sw + rx*dw + l]`. Each
    window offset then starts its own aligned rows in UB, so a vector over the output positions
    starts aligned and runs contiguous whatever the offsets and strides; the GM <-> UB DMA makes
    the copies (overlapping, shifted, strided GM reads; GM strides per dim, UB strides in whole
    blocks). Loops around the region (tile loops) go with the innermost part."""

    dims: tuple  # per unfolded tensor dim: (dim, rvar or None, rstep, parts, const)

    @property
    def writable(self) -> bool:
        """Each element of the box one tensor element (no window, parts apart): a tensor written
        in the region may be laid out so."""
        return all(rvar is None for _d, rvar, *_r in self.dims)

    def same(self, other) -> bool:
        if other is None or len(self.dims) != len(other.dims):
            return False
        for (d, r, rs, parts, k), (d2, r2, rs2, parts2, k2) in zip(self.dims, other.dims):
            if (d, rs, k, len(parts)) != (d2, rs2, k2, len(parts2)) or (r is None) != (r2 is None) \
                    or r is not None and not r.same_as(r2):
                return False
            if any(c != c2 or not v.same_as(v2) for (v, c), (v2, c2) in zip(parts, parts2)):
                return False
        return True

    def forms(self, forms: list) -> list:
        """The affine forms of an access's indices over the view's dims."""
        out, windows = [], []
        unfolded = {d: (rvar, parts) for d, rvar, _rs, parts, _k in self.dims}
        for d, (coeffs, _c) in enumerate(forms):
            if d not in unfolded:
                out.append((coeffs, _c))
                continue
            rvar, parts = unfolded[d]
            if rvar is not None:
                windows.append(({rvar: 1}, 0))
            inner = parts[-1][1]
            rest = {v: c // inner for v, c in coeffs.items()
                    if not (rvar is not None and v.same_as(rvar)) and not any(v.same_as(p) for p, _c in parts)}
            out += [({v: 1}, 0) for v, _c in parts[:-1]] + [({parts[-1][0]: 1, **rest}, 0)]
        return windows + out

    def gm(self, strides: list) -> tuple[list, int]:
        """GM element strides of the view's dims (from the tensor's) and its GM offset."""
        out, windows, const = [], [], 0
        unfolded = {d: (rvar, rstep, parts, k) for d, rvar, rstep, parts, k in self.dims}
        for d, g in enumerate(strides):
            if d not in unfolded:
                out.append(g)
                continue
            rvar, rstep, parts, k = unfolded[d]
            if rvar is not None:
                windows.append(rstep * g)
            out += [c * g for _v, c in parts]
            const += k * g
        return windows + out, const


@dataclass
class _Access:
    """A tensor access by name and indices (what `_access_forms` looks up)."""

    name: str
    indices: object

    @property
    def buffer(self):
        return self


class _Flat:
    """The UB view of a flattened tensor (`_FLATS`): one dim, the element's address."""

    def gm(self, strides: list) -> tuple[list, int]:
        return [1], 0


class _NotDense(Exception):
    """An unpadded (dense) UB layout does not work for this region: use the padded one."""


class Translator:
    layout_mode = "padded"  # UB boxes: "dense" unpadded, "live" innermost non-unit dim padded, "padded"
    fold_rows = True  # rows of a statement folded into repeats where that is cheaper (`_Compute._rows`)
    row_temp_bytes = 16384  # the largest temp of several rows (`_Compute._rows`)

    @property
    def dense(self) -> bool:
        return self.layout_mode == "dense"

    def __init__(self, func, spec, name: str, double_buffer: bool):
        from akg.backends.npu import isa

        self.isa, self.spec, self.func, self.name = isa, spec, func, name
        self.double_buffer = double_buffer
        self.params = {}  # tir buffer name -> isa GM buffer
        self.param_order = []
        self.tir_params = []
        self.ub_offset = 0
        self.buffers = []
        self.var_names = {}  # tir Var -> isa name
        self.blocks = 1
        self.block_var = None
        self.counter = 0
        self.region_users = defaultdict(set)
        self.workspaces = []
        self.grid_vars = []
        self.grid = ()
        self.scope_offsets = defaultdict(int)
        self.views = {}  # tensor name -> Window: the region's tensors read through a window (unfolded in UB)

    # --- helpers ------------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def _ident(self, name: str) -> str:
        import re

        out = re.sub(r"\W", "_", name)
        return out if out and not out[0].isdigit() else f"t{out}"

    def alloc(self, name: str, shape, dtype: str):
        isa = self.isa
        align = self.spec.ub_alignment
        offset = -(-self.ub_offset // align) * align
        buf = isa.Buffer(isa.Scope.UB, self.fresh(self._ident(name) + "_ub"), tuple(shape), dtype, offset)
        self.ub_offset = offset + buf.nbytes
        self.buffers.append(buf)
        return buf

    def alloc_in(self, scope: str, name: str, shape, dtype: str):
        """A local buffer in L1 / L0A / L0B / L0C, aligned as the scope needs."""
        isa = self.isa
        align = self.spec.alignment(scope, np.dtype(dtype).itemsize)
        offset = -(-self.scope_offsets[scope] // align) * align
        buf = isa.Buffer(getattr(isa.Scope, scope), self.fresh(self._ident(name) + "_" + scope.lower()), tuple(shape),
                         dtype, offset)
        self.scope_offsets[scope] = offset + buf.nbytes
        self.buffers.append(buf)
        return buf

    def iaff(self, coeffs: dict, const: int):
        """An isa Affine of a TIR affine form over the outer loops and the block."""
        isa = self.isa
        out = isa.Affine(const)
        for v, c in coeffs.items():
            if self.block_var is not None and v.same_as(self.block_var):
                out = out + isa.BLOCK * c
            elif any(v.same_as(g) for g in self.grid_vars):
                axis = next(i for i, g in enumerate(self.grid_vars) if v.same_as(g))
                out = out + isa.block_axis(axis) * c
            elif v in self.var_names:
                name = self.var_names[v]
                if isinstance(name, _Combined):
                    out = out + isa.var(name.name) * (c * name.factor) + isa.var(HALF) * c
                else:
                    out = out + isa.var(name) * c
            else:
                raise NpuMappingError(f"{self.name}: loop {v} is not an outer loop here")
        return out

    # --- entry ----------------------------------------------------------------------------------

    def translate(self):
        isa = self.isa
        func = self.func
        for p in func.params:
            buf = p
            if _npu_dtype(buf.dtype) not in NPU_DTYPES:
                raise NpuMappingError(f"{self.name}: tensor '{buf.name}' is {buf.dtype}; the NPU computes in "
                                      f"{', '.join(NPU_DTYPES)} (not supported yet)")
            gm = isa.Buffer(isa.Scope.GM, self._ident(buf.name), tuple(int(s) for s in buf.shape) or (1,),
                            _npu_dtype(buf.dtype))
            self.params[buf.name] = gm
            self.param_order.append(gm)
        ranges, splits, flats = _LOOP_RANGES.set({}), _LOOP_SPLITS.set({}), _FLATS.set({})
        try:
            return self._translate(func)
        finally:
            _LOOP_RANGES.reset(ranges)
            _LOOP_SPLITS.reset(splits)
            _FLATS.reset(flats)

    def _translate(self, func):
        isa = self.isa
        top = _parse_top(func.body, self.name)
        for region in self._regions(top):
            for nest in _nests(region.items):
                for b in [nest.store.buffer, *(l.source for l in _loads(nest.store.value))]:
                    self.region_users[b.name].add(id(region))
        body = self._top(top, outer_parallel=True)
        params = tuple(self.param_order) + tuple(self.workspaces)
        if self.grid:
            return isa.Program(self._ident(self.name), params, tuple(self.buffers), tuple(body), grid=self.grid)
        return isa.Program(self._ident(self.name), params, tuple(self.buffers), tuple(body), blocks=self.blocks)

    def _regions(self, items):
        for it in items:
            if isinstance(it, Region):
                yield it
            elif isinstance(it, TopLoop):
                yield from self._regions(it.items)

    def _gm(self, tir_buffer):
        """The GM buffer of a tensor (a parameter, or a workspace for an intermediate that
        several regions share)."""
        isa = self.isa
        name = tir_buffer.name
        if name not in self.params:
            if _npu_dtype(tir_buffer.dtype) not in NPU_DTYPES:
                raise NpuMappingError(f"{self.name}: tensor '{name}' is {tir_buffer.dtype} (not supported yet)")
            gm = isa.Buffer(isa.Scope.GM, self._ident(name) + "_ws", tuple(int(s) for s in tir_buffer.shape) or (1,),
                            _npu_dtype(tir_buffer.dtype))
            self.params[name] = gm
            self.workspaces.append(gm)
        return self.params[name]

    def _top(self, items, outer_parallel: bool) -> list:
        """Top-level items -> instructions with syncs."""
        seq = []
        if outer_parallel and len(items) == 1 and isinstance(items[0], TopLoop) and items[0].grid:
            axes, cur = [], items
            while len(cur) == 1 and isinstance(cur[0], TopLoop) and cur[0].grid:
                axes.append((cur[0].var, cur[0].extent))
                cur = cur[0].items
            self.grid_vars = [v for v, _ in axes]
            self.grid = tuple(e for _, e in axes)
            return self._top(cur, outer_parallel=False)
        base = self.ub_offset
        for k, it in enumerate(items):
            if k:
                # the items run one after another: each reuses the UB from `base`, a barrier
                # ordering every access of the ones before (aliased bytes) before its own
                self.ub_offset = base
                seq.append(Compound([self.isa.PipeBarrier()], {}))
            if isinstance(it, TopLoop) and it.grid:
                raise NpuMappingError(f"{self.name}: a block grid below other loops (not supported)")
            if isinstance(it, TopLoop) and it.parallel and outer_parallel and self.block_var is None \
                    and len(items) == 1:
                # (a core split next to other loop nests, e.g. a loopless statement, runs as a
                # serial loop on one core)
                self.block_var, self.blocks = it.var, it.extent
                return self._top(it.items, outer_parallel=False)
            if isinstance(it, TopLoop):
                seq.append(self._loop(it))
            else:
                seq.extend(self._region(it, None))
        body, _b, _a = SyncPass().body(seq)
        return body

    def _loop(self, it: TopLoop):
        """A serial tile loop (double-buffered when it is the innermost one around a region
        and the config asks for it) -> a Compound."""
        isa = self.isa
        name = self.fresh("i")
        regions_only = all(isinstance(x, Region) for x in it.items)
        halves = regions_only and it.extent >= 2 and it.extent % 2 == 0 and \
            all(_mark_parts(x.name)[0] == 2 for x in it.items)
        if halves:
            pairs, odd = divmod(it.extent, 2)
            inner = []
            _ivar, _jvar = isa.var(name), isa.var(HALF)
            self.var_names[it.var] = _Combined(name, 2)
            for r in it.items:
                inner.extend(self._region(r, HALF))
            body, before, after = SyncPass().body(inner, carried=2)
            loop = isa.Loop(name, pairs, (isa.Loop(HALF, 2, tuple(body)),))
            instrs = [*before, loop, *after]
            parts_src = [x for x in inner]
            comp = _compound(parts_src, instrs)
            if odd:
                raise NpuMappingError(f"{self.name}: an odd number of tiles ({it.extent}) under double buffering")
            return comp
        self.var_names[it.var] = name
        inner = []
        for x in it.items:
            if isinstance(x, TopLoop):
                inner.append(self._loop(x))
            else:
                inner.extend(self._region(x, None))
        body, before, after = SyncPass().body(inner, carried=1)
        return _compound(inner, [*before, isa.Loop(name, it.extent, tuple(body)), *after])

    # --- a tile region --------------------------------------------------------------------------

    def _region(self, region: Region, half: str | None) -> list:
        """The DMAs and vector instructions of one tile region, each with its accesses."""
        where = f"{self.name} ({region.name})"
        _bufs, kt = _mark_parts(region.name)
        self.views = {}
        if kt:
            from akg.backends.npu.cube import cube_region

            return cube_region(self, region, half, kt, where)
        state = (self.ub_offset, len(self.buffers), self.counter)
        # layouts tried in turn: unpadded (every statement one contiguous range: rows of a
        # few elements need no 32-byte padding), the innermost dim of more than one element
        # padded (trailing unit dims are not rows), then the last dim padded whatever its size;
        # each first with rows folded into repeats, then (when their temps of several rows
        # overflow the UB) without
        # (row temps of up to ROW_TEMP_BYTES_LARGE first: more rows per instruction, while they fit)
        modes = ("dense", "live") if all(isinstance(it, Nest) for it in region.items) else ("live",)
        large, small = _Compute.ROW_TEMP_BYTES_LARGE, _Compute.ROW_TEMP_BYTES
        attempts = ([(m, True, large) for m in modes] + [(m, True, small) for m in modes]
                    + [(m, False, small) for m in modes] + [("padded", True, small)])
        for mode, rows, temp_bytes in attempts:
            self.layout_mode, self.fold_rows, self.row_temp_bytes = mode, rows, temp_bytes
            try:
                records = self._region_tiles(region, half, where, state)
                if self.ub_offset <= self.spec.ub_usable_bytes:
                    return records
            except (_NotDense, NpuMappingError):
                pass  # the next layout (the last one raises its typed error)
            finally:
                self.layout_mode, self.fold_rows, self.row_temp_bytes = "padded", True, small
            self._restore(state)
        self.fold_rows = False
        try:
            return self._region_tiles(region, half, where, state)
        finally:
            self.fold_rows = True

    def _restore(self, state) -> None:
        self.ub_offset, self.counter = state[0], state[2]
        del self.buffers[state[1]:]

    def _region_tiles(self, region: Region, half, where: str, state) -> list:
        """A vector region in the current layout; past the UB, its largest reduction loop in
        tiles (partial sums stay in UB across them)."""
        records = self._vector_region(region.items, half, where)
        if self.ub_offset <= self.spec.ub_usable_bytes:
            return records
        split = _reduction_loop(region.items, where)
        if split is None:
            return records
        nest, kv, K = split
        after_full = (self.ub_offset, len(self.buffers), self.counter)
        for kt in sorted((d for d in range(1, K) if K % d == 0), reverse=True):
            self._restore(state)
            try:
                records = self._vector_region(region.items, half, where, split=(nest, kv, K, kt))
            except NpuMappingError:
                break
            if self.ub_offset <= self.spec.ub_usable_bytes:
                return records
        self._restore(state)
        records = self._vector_region(region.items, half, where)
        assert self.ub_offset == after_full[0]
        return records

    def _vector_region(self, items, half, where: str, split=None) -> list:
        """The DMAs and vector instructions of a region's items; `split` = (nest, kv, K, kt):
        the reduction loop kv of `nest` run in K / kt tiles of kt (the operands it moves
        brought in per tile, ping-pong halves when the region has none)."""
        isa = self.isa
        if split is None:
            pads = [it for it in items if isinstance(it, Nest) and self._padding_of(it, items, where) is not None]
            if pads:
                records = []
                for nest in pads:
                    records += self._padding(nest, *self._padding_of(nest, items, where), half, where)
                rest = [it for it in items if not any(it is p for p in pads)]
                return records + (self._vector_region(rest, half, where) if rest else [])
        ksplit = {}
        kname = None
        kways = 1
        if split is not None:
            from tvm import tirx

            snest, kv, K, kt = split
            steps = K // kt
            kways = 2 if half is None and self.double_buffer and steps >= 2 and steps % 2 == 0 else 1
            kname = self.fresh("k")
            kk = tirx.Var(kname, "int32")
            self.var_names[kk] = _Combined(kname, 2) if kways == 2 else kname
            ksplit = {kv: (kk, kt)}
            new = Nest(snest.store, [(v, kt if v.same_as(kv) else e) for v, e in snest.loops])
            items = [new if it is snest else it for it in items]
        self.ksplit = ksplit
        nests = list(_nests(items))
        self.views = self._window_views(nests, where)
        locals_: dict[str, Local] = {}
        first_access: dict[str, str] = {}
        tir_bufs = {}
        for nest in nests:
            accesses = [(l, "r") for l in _loads(nest.store.value)] + [(nest.store, "w")]
            for acc, kind in accesses:
                b = _buf(acc)
                tir_bufs[b.name] = b
                first_access.setdefault(b.name, kind)
                self._extend_box(locals_, b, acc.indices, nest.loops, where)
        for name, loc in locals_.items():
            loc.view = self.views.get(name) or (_Flat() if name in (_FLATS.get() or {}) and len(loc.sizes) == 1 and
                                                len(tir_bufs[name].shape) > 1 else None)
        written = {n.store.buffer.name for n in nests}
        read = {l.source.name for n in nests for l in _loads(n.store.value)}
        if not ksplit:
            self._permute(locals_, nests, where)
        outputs = {b.name for b in self.func.params}
        pre, post, kpre = [], [], []
        kh = HALF if kways == 2 else None
        for name, loc in locals_.items():
            b = tir_bufs[name]
            shared = name in outputs or len(self.region_users[name]) > 1
            gm_backed = shared or name in self.params
            copy_in = gm_backed and name in read and first_access[name] == "r"
            copy_out = gm_backed and name in written and (name in outputs or len(self.region_users[name]) > 1)
            moving = ksplit and any(any(v.same_as(kk) for v in o) for o, _l in loc.lo)
            if moving and (copy_out or not copy_in):
                raise NpuMappingError(f"{where}: '{name}' is written along the tiled reduction loop")
            loc.halves = (half is not None and (copy_in or copy_out)) if not moving else kways == 2
            padded = self._layout(loc)
            if loc.halves:
                loc.slot_elems = -(-padded // self._block(loc.dtype)) * self._block(loc.dtype)
                loc.buffer = self.alloc(name, (2, loc.slot_elems), loc.dtype)
            else:
                loc.buffer = self.alloc(name, (padded,), loc.dtype)
            if moving:
                kpre.extend(self._dma(loc, self._gm(b), into=True, half=kh or half))
                loc.moving = True
                continue
            if copy_in:
                pre.extend(self._dma(loc, self._gm(b), into=True, half=half))
            if copy_out:
                post.extend(self._dma(loc, self._gm(b), into=False, half=half))
        self.ksplit = {}
        comp = _Compute(self, locals_, half, where)
        if not ksplit:
            body = fold_initial_values(drop_recomputed(comp.items(items)))
            return pre + comp.prelude + body + post
        at = items.index(new)
        head, tail = comp.items(items[:at]), comp.items(items[at + 1:])
        comp.half = kh or half
        kbody = kpre + comp.items([new])
        comp.half = half
        if kways == 2:
            body, before, after = SyncPass(ids=(3, 4, 5)).body(kbody, carried=2)
            loop = isa.Loop(kname, steps // 2, (isa.Loop(HALF, 2, tuple(body)),))
        else:
            body, before, after = SyncPass(ids=(3, 4, 5)).body(kbody, carried=1)
            loop = isa.Loop(kname, steps, tuple(body))
        return pre + comp.prelude + head + [_compound(kbody, [*before, loop, *after])] + tail + post

    def _block(self, dtype: str) -> int:
        return self.spec.block_elements(np.dtype(dtype).itemsize)

    # --- padding producers ---------------------------------------------------------------------

    def _padding_of(self, nest, items, where: str):
        """(the load, the fill value) when `nest` is a padding producer whose result goes to GM:
        `P[i] = inside(X, i - k) ? X[i - k] : c` (the condition exactly X's bounds test over
        the loops' ranges, X read from GM and not written in the region, P not read in it);
        None otherwise."""
        from tvm import tirx

        store, value = nest.store, nest.store.value
        kind = type(value).__name__
        if kind == "Call" and str(value.op.name).endswith("if_then_else"):
            cond, tv, fv = value.args
        elif kind == "Select":
            cond, tv, fv = value.condition, value.true_value, value.false_value
        else:
            return None
        if not _is_load(tv) or not isinstance(fv, (tirx.FloatImm, tirx.IntImm)) or _dt(tv) != _dt(value):
            return None
        pname, x = store.buffer.name, tv.source
        others = [n for n in _nests(items) if n is not nest]
        if any(n.store.buffer.name == x.name for n in others) or x.name == pname or \
                any(l.source.name == pname for n in others for l in _loads(n.store.value)):
            return None
        if pname not in {b.name for b in self.func.params} and len(self.region_users[pname]) < 2:
            return None  # P stays in UB: the vector path computes it
        if len(store.indices) != len(tv.indices) or len(x.shape) != len(tv.indices):
            return None
        try:
            pforms = [_affine(i, where) for i in store.indices]
            xforms = [_affine(i, where) for i in tv.indices]
        except NpuMappingError:
            return None
        ext = dict(nest.loops)
        if any(not _same_coeffs(pc, xc) for (pc, _p), (xc, _x) in zip(pforms, xforms)):
            return None
        bounds = _bounds_test(cond, xforms, where)
        if bounds is None:
            return None
        for d, ((coeffs, k), n) in enumerate(zip(xforms, x.shape)):
            if any(v not in ext for v in coeffs):  # moves with the outer loops: not padded
                if d in bounds or k != pforms[d][1] or int(n) != int(store.buffer.shape[d]):
                    return None
                continue
            fmin = k + sum(min(0, c * (ext[v] - 1)) for v, c in coeffs.items())
            fmax = k + sum(max(0, c * (ext[v] - 1)) for v, c in coeffs.items())
            lo, hi = bounds.get(d, (-math.inf, math.inf))
            if (max(lo, fmin), min(hi, fmax + 1)) != (max(0, fmin), min(int(n), fmax + 1)):
                return None
        return tv, float(fv.value)

    def _padding(self, nest, load, fill: float, half, where: str) -> list:
        """A padding producer as DMAs: P's box filled with the value in UB (`dup`) and written
        out, then X's part inside the tensor brought in and written out at its place in P (GM
        addresses need no alignment, UB ones do: no shifted copy in UB)."""
        isa = self.isa
        store = nest.store
        pbuf, xbuf = store.buffer, load.source
        boxes: dict = {}
        self._extend_box(boxes, pbuf, store.indices, nest.loops, where)
        self._extend_box(boxes, xbuf, load.indices, nest.loops, where)
        ploc, xloc = boxes[pbuf.name], boxes[xbuf.name]
        for d, ((outer, lo), size) in enumerate(zip(xloc.lo, xloc.sizes)):  # X's box inside X
            start, end = max(lo, 0), min(lo + size, int(xbuf.shape[d]))
            if (start, end) != (lo, lo + size) and outer or end <= start:
                raise NpuMappingError(f"{where}: a padding whose box moves with the tile loops (not supported yet)")
            xloc.lo[d], xloc.sizes[d] = (outer, start), end - start
        records = []
        for loc in (ploc, xloc):
            loc.halves = half is not None
            padded = self._layout(loc)
            if loc.halves:
                loc.slot_elems = -(-padded // self._block(loc.dtype)) * self._block(loc.dtype)
                loc.buffer = self.alloc(loc.name, (2, loc.slot_elems), loc.dtype)
            else:
                loc.buffer = self.alloc(loc.name, (padded,), loc.dtype)
        pgm, xgm = self._gm(pbuf), self._gm(xbuf)
        records += self._dma(xloc, xgm, into=True, half=half)
        slot = (ploc.buffer.name, HALF if ploc.halves else None)
        base = isa.var(half) * ploc.slot_elems if ploc.halves else isa.Affine()
        lanes = self.spec.lanes(ploc.buffer.itemsize)
        count = ploc.slot_elems if ploc.halves else ploc.buffer.size
        start = 0
        while start < count:
            repeat = min(-(-(count - start) // lanes), self.spec.max_repeat)
            mask = None if count - start >= repeat * lanes else (count - start) - (repeat - 1) * lanes
            if mask is not None and repeat > 1:
                repeat, mask = repeat - 1, None
            records.append(("acc", isa.Vector("dup", ploc.buffer.ref(base + start), (fill,), repeat, mask), [],
                            [slot]))
            start += repeat * lanes if mask is None else mask
        records += self._dma(ploc, pgm, into=False, half=half)
        # X's box written at its place in P: P index = X index - (X index - P index)
        offsets = [_affine(x, where)[1] - _affine(p, where)[1] for p, x in zip(store.indices, load.indices)]
        inner = Local(pbuf.name, xloc.dtype, [(o, lo - k) for (o, lo), k in zip(xloc.lo, offsets)], list(xloc.sizes),
                      list(xloc.strides), xloc.buffer, xloc.halves, xloc.slot_elems)
        records += self._dma(inner, pgm, into=False, half=half)
        return records

    def _index_forms(self, name: str, indices, where: str) -> list:
        """The affine forms of an access's indices, over its UB box's dims (a windowed
        tensor's over its unfolded view, `Window`)."""
        if name in (_FLATS.get() or {}):
            forms = _access_forms(_Access(name, indices), where)
        else:
            forms = [_affine(i, where) for i in indices]
        view = self.views.get(name)
        return forms if view is None else view.forms(forms)

    def _window_views(self, nests, where: str) -> dict:
        """The tensors of a region to unfold in UB (`Window`): every access of the tensor in the
        region unfolds the same way (`_window_of`), and a tensor the region writes has no
        window (the unfolded copies of an element would go stale)."""
        found: dict = {}
        for nest in nests:
            order = [(v, e) for v, e in nest.loops]
            dst = set()
            for idx in nest.store.indices:
                dst |= {v for v, c in _affine(idx, where)[0].items() if c}
            for acc in [*_loads(nest.store.value), nest.store]:
                name = _buf(acc).name
                view = self._window_of(acc, order, dst, where)
                if name not in found:
                    found[name] = view
                elif found[name] is not None and not found[name].same(view):
                    found[name] = None
        written = {n.store.buffer.name for n in nests}
        return {n: v for n, v in found.items() if v is not None and (v.writable or n not in written)}

    def _window_of(self, acc, order: list, dst: set, where: str):
        """The `Window` of one access: its dims whose index is `sum(c_i x_i) + r*d + k` (x_i
        loops of the statement that its destination indexes, `parts`, or all summed loops where
        it indexes none; r at most one loop it does not index, in no other dim; loops around the region in multiples of the innermost
        part's coefficient), unfolded where there is a window, a stride (c > 1 for the innermost
        part), or parts whose rows are no whole 32-byte blocks; the innermost live dim one of
        them. None otherwise (a plain access)."""
        buf = _buf(acc)
        shape = [int(n) for n in buf.shape]
        live = [d for d, n in enumerate(shape) if n > 1]
        if not live:
            return None
        try:
            forms = [_affine(i, where) for i in acc.indices]
        except NpuMappingError:
            return None
        block = self._block(_npu_dtype(buf.dtype))

        def at(v) -> int:
            return next((i for i, (w, _e) in enumerate(order) if w.same_as(v)), -1)

        def in_dst(v) -> bool:
            return any(v.same_as(w) for w in dst)

        dims, used = [], []
        for d, (coeffs, const) in enumerate(forms):
            window = [v for v, c in coeffs.items() if c and at(v) >= 0 and not in_dst(v)]
            parts = sorted(((v, c) for v, c in coeffs.items() if c and at(v) >= 0 and in_dst(v)),
                           key=lambda vc: (-vc[1], -at(vc[0])))
            used.append(window)
            if not parts and len(window) > 1:  # merged summed dims (a reshape read along a reduction)
                parts, window = sorted(((v, coeffs[v]) for v in window), key=lambda vc: (-vc[1], -at(vc[0]))), []
            if len(window) > 1 or not parts or any(c < 1 for _v, c in parts) or window and coeffs[window[0]] < 1:
                continue
            inner = parts[-1][1]
            others = [c for v, c in coeffs.items() if at(v) < 0]
            if any(c % inner for c in others):
                continue
            if not window and inner == 1 and all(c % block == 0 for _v, c in parts[:-1]):
                continue  # a plain dim (rows of whole blocks)
            spans = [c * (order[at(v)][1] - 1) for v, c in parts]
            if not window and any(c <= sum(spans[k + 1:]) for k, (_v, c) in enumerate(parts[:-1])):
                continue  # overlapping parts
            dims.append((d, window[0] if window else None, coeffs[window[0]] if window else 0, tuple(parts), const))
        if not dims or dims[-1][0] != live[-1]:
            return None
        for d, rvar, *_rest in dims:  # a window loop in one dim only
            if rvar is not None and sum(any(rvar.same_as(v) for v in w) for w in used) > 1:
                return None
        return Window(tuple(dims))

    def _reference_order(self, nest, where) -> dict:
        """The loop order the region's UB tiles follow for one statement: the loops' own, or
        the order an access walks them in when that puts a longer loop innermost (a
        transpose whose loops end in a short dim moves along the long one instead)."""
        loops = list(nest.loops)
        ext = {v: e for v, e in loops}
        best = [v for v, _e in loops]
        for acc in [nest.store, *_loads(nest.store.value)]:
            seq = []
            for coeffs, _k in self._index_forms(_buf(acc).name, acc.indices, where):
                inner = [v for v, c in coeffs.items() if c and v in ext]
                if len(inner) == 1 and inner[0] not in seq:
                    seq.append(inner[0])
            if any(e > 1 and v not in seq for v, e in loops):
                continue  # only an access that walks every loop (a transpose, not a reduction)
            cand = [v for v, _e in loops if v not in seq] + seq
            if cand and ext[cand[-1]] > ext[best[-1]]:
                best = cand
        return {v: i for i, v in enumerate(best)}

    def _permute(self, locals_, nests, where):
        """UB dim orders: a tensor whose every access in the region walks its dims in another
        order than the loops (a transpose) is laid out in UB in the loops' order, the DMA
        doing the transpose (GM strides in any order, UB strides in whole 32-byte blocks)."""
        orders: dict[str, set] = defaultdict(set)
        for nest in nests:
            if any(l.source.name in self.views for l in _loads(nest.store.value)):
                # a statement over a window: the view's output positions are innermost, the
                # other tensors keep their own order (a schedule's inner batch loop is no reason
                # to transpose the destination)
                for acc in [nest.store, *_loads(nest.store.value)]:
                    orders[_buf(acc).name].add(None)
                continue
            pos = self._reference_order(nest, where)
            for acc in [nest.store, *_loads(nest.store.value)]:
                keys = []
                for d, (coeffs, _k) in enumerate(self._index_forms(_buf(acc).name, acc.indices, where)):
                    inner = [pos[v] for v, c in coeffs.items() if c and v in pos]
                    keys.append((max(inner) if inner else -1, d))
                orders[_buf(acc).name].add(tuple(d for _k, d in sorted(keys)))
        for name, loc in locals_.items():
            found = orders.get(name, set())
            if len(found) != 1 or None in found or loc.view is not None:  # a window's view keeps its order
                continue
            perm = list(next(iter(found)))
            live = [d for d in perm if loc.sizes[d] > 1]
            if live != sorted(live):
                loc.perm = perm

    def _extend_box(self, locals_, buf, indices, loops, where):
        inner = {v for v, _ in loops}
        ext = {v: e for v, e in loops}
        lo, hi, outer = [], [], []
        forms = self._index_forms(buf.name, indices, where)
        for d, (coeffs, const) in enumerate(forms):
            out = {v: c for v, c in coeffs.items() if v not in inner}
            for v, c in coeffs.items():
                for kv, (kk, kt) in getattr(self, "ksplit", {}).items():
                    if v.same_as(kv) and v in inner:
                        out[kk] = out.get(kk, 0) + c * kt
            mn = const + sum(min(0, c * (ext[v] - 1)) for v, c in coeffs.items() if v in inner)
            mx = const + sum(max(0, c * (ext[v] - 1)) for v, c in coeffs.items() if v in inner)
            lo.append(mn)
            hi.append(mx)
            outer.append(out)
        loc = locals_.get(buf.name)
        if loc is None:
            locals_[buf.name] = Local(buf.name, _npu_dtype(buf.dtype), [(o, l) for o, l in zip(outer, lo)],
                                      [h - l + 1 for h, l in zip(hi, lo)], [])
            return
        for d in range(len(forms)):
            o, l0 = loc.lo[d]
            if not _same_coeffs(o, outer[d]):
                raise NpuMappingError(f"{where}: the accesses of '{buf.name}' move differently with the outer "
                                      f"loops (not supported yet)")
            h0 = l0 + loc.sizes[d] - 1
            nl, nh = min(l0, lo[d]), max(h0, hi[d])
            loc.lo[d] = (o, nl)
            loc.sizes[d] = nh - nl + 1

    def _layout(self, loc: Local) -> int:
        """Row-major strides of the box (in `perm` order) with the last dim padded to a
        32-byte block (dense: unpadded); the buffer's elements."""
        sizes = list(loc.sizes) or [1]
        block = self._block(loc.dtype)
        order = list(loc.perm) if loc.perm is not None else list(range(len(sizes)))
        live = [i for i, d in enumerate(order) if sizes[d] > 1]
        if self.layout_mode in ("dense", "live"):
            inner = live[-1] if live else len(order) - 1
            lead = len(live) > 1 and not self.dense
        else:
            # padded: the innermost dim, even of one element (a reduction's one value per
            # row then starts a 32-byte block, as its per-row instructions need)
            inner = len(order) - 1
            lead = any(sizes[d] > 1 for d in order[:-1])
        strides, acc = [1] * len(sizes), 1
        for i in reversed(range(len(order))):
            d = order[i]
            strides[d] = acc
            if i == inner:
                acc *= -(-sizes[d] // block) * block if lead else sizes[d]
            elif i < inner:
                acc *= sizes[d]
        loc.strides = strides
        return max(acc, 1)

    def _dma(self, loc: Local, gm, into: bool, half):
        """GM <-> UB copies of a box: dims merged where both sides are contiguous, at most 3
        per DMA (outer dims as a loop)."""
        isa = self.isa
        gstrides = list(isa.contiguous_strides(gm.shape)) if gm.shape else [1]
        gconst = 0
        if loc.view is not None:  # a window unfolded: the view's dims over the tensor's
            gstrides, gconst = loc.view.gm(gstrides)
        order = list(loc.perm) if loc.perm is not None else list(range(len(loc.sizes)))
        sizes, starts, shift = list(loc.sizes), [l for _o, l in loc.lo], 0
        if into and loc.view is None:
            # a box that reaches past the tensor (the unchosen branch of a select: `c < 4 ?
            # a[c] : b[c - 4]`) brings in only the part inside it, where the box does not move
            # with the outer loops; the lanes outside are never chosen
            for d, ((outer, lo), size) in enumerate(zip(loc.lo, loc.sizes)):
                if outer or d >= len(gm.shape):
                    continue
                start, end = max(lo, 0), min(lo + size, gm.shape[d])
                if (start, end) != (lo, lo + size) and end > start:
                    sizes[d], starts[d] = end - start, start
                    shift += (start - lo) * loc.strides[d]
        dims = [(sizes[d], gstrides[d], loc.strides[d]) for d in order if sizes[d] > 1]
        merged = []
        for n, gs, ls in dims:
            if merged and merged[-1][1] == gs * n and merged[-1][2] == ls * n:
                pn, _pg, _pl = merged[-1]
                merged[-1] = (pn * n, gs, ls)
            else:
                merged.append((n, gs, ls))
        if not merged:
            merged = [(1, 1, 1)]
        gbase = isa.Affine(gconst)
        for (o, _l), l, gs in zip(loc.lo, starts, gstrides):
            gbase = gbase + self.iaff(o, l) * gs
        lbase = isa.Affine(shift)
        if loc.halves:
            lbase = lbase + isa.var(half) * loc.slot_elems
        loops, loops_dims = [], []
        while len(merged) > 3:
            n, gs, ls = merged.pop(0)
            loops_dims.append((n, gs, ls))
            v = self.fresh("d")
            loops.append((v, n))
            gbase = gbase + isa.var(v) * gs
            lbase = lbase + isa.var(v) * ls
        shape = tuple(n for n, _, _ in merged)
        gsd = tuple(g for _, g, _ in merged)
        lsd = tuple(l for _, _, l in merged)
        if self.dense and any(n > 1 and ls != 1 and (ls * loc.buffer.itemsize) % self.spec.vector_block_bytes
                              for n, _g, ls in merged + loops_dims):
            raise _NotDense()
        ub = loc.buffer.ref(lbase)
        g = gm.ref(gbase)
        slot = (loc.buffer.name, HALF if loc.halves else None)
        if into:
            instr = isa.Dma(g, ub, shape, gsd, lsd)
            rec = ("acc", instr, [(gm.name, None)], [slot])
        else:
            instr = isa.Dma(ub, g, shape, lsd, gsd)
            rec = ("acc", instr, [slot], [(gm.name, None)])
        for v, n in reversed(loops):
            instr = isa.Loop(v, n, (instr,))
            rec = ("acc", instr, rec[2], rec[3])
        return [rec]


def divisors_upto(n: int, cap: int) -> list:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _reduction_loop(items, where: str):
    """(nest, var, extent) of the largest top-level statement of a region with a reduction
    loop: a loop of the statement that its destination does not index but its sources do."""
    best = None
    for it in items:
        if not isinstance(it, Nest):
            continue
        store = it.store
        dvars = set()
        for coeffs, _k in _access_forms(store, where):
            dvars |= set(coeffs)
        svars = set()
        for ld in _loads(store.value):
            if ld.source.same_as(store.buffer):
                continue
            for coeffs, _k in _access_forms(ld, where):
                svars |= set(coeffs)
        for v, e in it.loops:
            if e > 1 and v not in dvars and v in svars:
                if best is None or e > best[2]:
                    best = (it, v, e)
    return best


def _value_vars(expr) -> list:
    """The loop variables an expression uses as values (outside the indices of its loads)."""
    from tvm import tirx

    found = []

    def visit(e):
        if isinstance(e, tirx.Var):
            if not any(e.same_as(v) for v in found):
                found.append(e)
            return
        if _is_load(e):
            return
        if type(e).__name__ == "Call":
            for a in e.args:
                visit(a)
            return
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            if hasattr(e, name):
                visit(getattr(e, name))

    visit(expr)
    return found


def _key(load) -> tuple:
    return (load.source.name, tuple(str(i) for i in load.indices))


class _Combined:
    """A tile loop split into pairs of tiles: tile = 2 * i + j."""

    def __init__(self, name: str, factor: int):
        self.name, self.factor = name, factor


def _same_coeffs(a: dict, b: dict) -> bool:
    if len(a) != len(b):
        return False
    for v, c in a.items():
        if not any(v.same_as(w) and c == d for w, d in b.items()):
            return False
    return True


# --- statements -> vector instructions ----------------------------------------------------------------


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}
_UNARY_CALLS = {"tirx.exp": "exp", "tirx.log": "ln", "tirx.sqrt": "sqrt", "tirx.rsqrt": "rsqrt", "tirx.fabs": "abs"}
_REDUCE = {"Add": "sum", "Max": "max", "Min": "min"}


def _in_fp32(x, body):
    """body(x) computed in float32 (an fp16 value is cast up and the result cast back)."""
    from tvm import tirx

    dt = _dt(x)
    if dt == "float32":
        return body(x)
    return tirx.Cast(dt, body(tirx.Cast("float32", x)))


def _expand_tanh(call):
    """tanh(x) = (e - 1) / (e + 1), e = exp(2 min(max(x, -10), 10)), in float32 (|x| >= 10
    is +-1 in float32; the absolute error is a few ulp of 1 near 0, well inside the checks)."""
    from tvm import tirx

    def body(x):
        c = lambda v: tirx.const(v, "float32")  # noqa: E731
        e = tirx.exp(tirx.Min(tirx.Max(x, c(-10.0)), c(10.0)) * c(2.0))
        return (e - c(1.0)) / (e + c(1.0))

    return _in_fp32(call.args[0], body)


def _expand_pow(call):
    """pow(x, y) with the vector instructions: a constant small integer exponent as products
    (and a reciprocal), 0.5 / -0.5 as sqrt / rsqrt; otherwise, in float32, exp(y ln |x|), 1
    where y == 0, and for x < 0 the sign of (-1)^y where y is an integer (int32 casts truncate)
    and NaN where it is not: NumPy's float power, case by case."""
    from tvm import tirx

    x, y = call.args
    dt = _dt(x)
    if isinstance(y, (tirx.FloatImm, tirx.IntImm)):
        v = float(y.value)
        if v == 0.5:
            return tirx.sqrt(x)
        if v == -0.5:
            return tirx.rsqrt(x)
        if v == int(v) and abs(v) <= 4:
            n = int(abs(v))
            r = tirx.const(1.0, dt)
            for _ in range(n):
                r = x if isinstance(r, tirx.FloatImm) else r * x
            return tirx.const(1.0, dt) / r if v < 0 else r

    def body(xy):
        xf, yf = xy
        c = lambda v: tirx.const(v, "float32")  # noqa: E731
        r = tirx.exp(yf * tirx.log(tirx.abs(xf)))
        r = tirx.Select(yf == c(0.0), c(1.0), r)
        yi = tirx.Cast("float32", tirx.Cast("int32", yf))
        half = tirx.Cast("float32", tirx.Cast("int32", yf * c(0.5)))
        odd = yi - half * c(2.0) != c(0.0)
        negative = tirx.Select(yi == yf, tirx.Select(odd, c(0.0) - r, r), c(float("nan")))
        return tirx.Select(xf < c(0.0), negative, r)

    if dt == "float32" and _dt(y) == "float32":
        return body((x, y))
    if dt not in ("float16", "float32") or _dt(y) not in ("float16", "float32"):
        return None
    return tirx.Cast(dt, body((tirx.Cast("float32", x), tirx.Cast("float32", y))))


_EXPANDED_CALLS = {"tirx.tanh": _expand_tanh, "tirx.pow": _expand_pow}
_BOOL_REDUCE = {"Or": "max", "And": "min"}  # any / all over bools as 0 / 1


@dataclass
class Opd:
    """A vector operand: a number, or a buffer address with its coefficient along the vector
    loop (1: contiguous, 0: broadcast) and along the other loops."""

    kind: str  # "num" | "ref"
    dtype: str
    value: float = 0.0
    buffer: object = None
    base: object = None  # isa Affine over the outer loops (the region's own loops excluded)
    coeffs: dict = field(default_factory=dict)  # region loop Var -> element coefficient
    slot: tuple = None
    row: int = 0  # element stride between rows (rows folded into repeats)


class _Compute:
    def __init__(self, tr: Translator, locals_: dict, half, where: str):
        self.tr, self.isa, self.spec = tr, tr.isa, tr.spec
        self.locals, self.half, self.where = locals_, half, where
        self.temps = defaultdict(list)
        self.loop_names = {}
        self.iotas = {}
        self.prelude = []  # records before the region's statements (index vectors)

    def items(self, items) -> list:
        out = []
        for it in items:
            if isinstance(it, Nest):
                out.extend(self.nest(it))
            else:
                name = self.tr.fresh("s")
                self.loop_names[it.var] = name
                inner = self.items(it.items)
                body, before, after = SyncPass().body(inner, carried=1)
                out.append(_compound(inner, [*before, self.isa.Loop(name, it.extent, tuple(body)), *after]))
        return out

    # operands

    def operand(self, load, loops) -> Opd:
        isa = self.isa
        loc = self.locals[_buf(load).name]
        where = self.where
        base = isa.Affine()
        coeffs: dict = {}
        inner = {v for v, _ in loops}
        for d, (c, k) in enumerate(self.tr._index_forms(_buf(load).name, load.indices, where)):
            stride = loc.strides[d]
            base = base + (k - loc.lo[d][1]) * stride
            for v, cv in c.items():
                if v in inner:
                    coeffs[v] = coeffs.get(v, 0) + cv * stride
                elif v in self.loop_names:
                    base = base + isa.var(self.loop_names[v]) * (cv * stride)
        if loc.halves:
            base = base + isa.var(self.half) * loc.slot_elems
        return Opd("ref", loc.dtype, buffer=loc.buffer, base=base, coeffs={v: c for v, c in coeffs.items() if c},
                   slot=(loc.buffer.name, HALF if loc.halves else None))

    def temp(self, dtype: str, k: int, elems: int):
        # temps of a few repeats (a row's statistics) in their own pool: they do not overwrite
        # the row-sized temps whose values a later statement may reuse (`reuse.drop_recomputed`)
        small = elems <= 4 * self._lanes(dtype)
        pool = self.temps[(dtype, "small") if small else dtype]
        while len(pool) <= k:
            pool.append(None)
        if pool[k] is None or pool[k].size < elems:
            pool[k] = self.tr.alloc(f"tmp_{dtype}_{'s' if small else ''}{k}", (max(elems, self._lanes(dtype)),), dtype)
        return pool[k]

    def _lanes(self, dtype: str) -> int:
        return self.spec.lanes(np.dtype(dtype).itemsize)

    # one statement

    def nest(self, nest: Nest) -> list:

        store = nest.store
        where = f"{self.where}: statement `{store.buffer.name}[...] = ...`"
        dst = self.operand(store, nest.loops)
        loops = list(nest.loops)
        value = store.value
        # a reduction: dst = dst op f(...) with dst invariant along a loop
        red = None
        name = type(value).__name__
        reducers = _BOOL_REDUCE if _dt(value) == "bool" else _REDUCE
        if name in reducers and loops:
            for a, b in ((value.a, value.b), (value.b, value.a)):
                if _is_load(a) and a.source.same_as(store.buffer) and \
                        all(_affine(x, where) == _affine(y, where) for x, y in zip(a.indices, store.indices)):
                    red = (reducers[name], b)
                    break
        loads = [self.operand(l, loops) for l in _loads(value)]

        def dense(v) -> bool:
            return all(o.coeffs.get(v, 0) in (0, 1) for o in loads)

        vec = None
        for v, e in reversed(loops):
            if dst.coeffs.get(v, 0) == 1 and dense(v):
                vec = v
                break
        if vec is None and red is not None:
            for v, e in reversed(loops):
                if dst.coeffs.get(v, 0) == 0 and dense(v):
                    return self.reduction(nest, dst, red, v, where)
        if vec is None:
            for v, e in reversed(loops):
                if dst.coeffs.get(v, 0) == 1:
                    vec = v  # strided operands: reported below
                    break
        return self.elementwise(nest, dst, vec, where)

    def _geometry(self, loops, vec, opds, keep=()):
        """Merge outer loops into the vector loop where every operand stays contiguous (or
        broadcast); returns (n elements, merged vars, the other loops). Loops whose index is a
        value of the statement (`keep`) are not merged (nothing is, when the vector loop's is)."""
        if vec is None:
            return 1, [], list(loops)
        ext = dict((v, e) for v, e in loops)
        n, merged = ext[vec], [vec]
        rest = [(v, e) for v, e in loops if not v.same_as(vec)]
        changed = not any(vec.same_as(w) for w in keep)
        while changed:
            changed = False
            for v, e in reversed(rest):
                if any(v.same_as(w) for w in keep):
                    continue
                if all(o.coeffs.get(v, 0) == o.coeffs.get(vec, 0) * n for o in opds):
                    n *= e
                    merged.append(v)
                    rest = [(w, f) for w, f in rest if not w.same_as(v)]
                    changed = True
                    break
        return n, merged, rest

    def _dense_ok(self, rest, vec, opds) -> None:
        """Unpadded boxes need every statement as one contiguous range from aligned starts;
        boxes padded only along their innermost non-unit dim need aligned rows."""
        if self.tr.layout_mode == "padded":
            return
        if rest and self.tr.dense:
            raise _NotDense()
        for o in opds:
            if o.kind != "ref" or (vec is not None and not o.coeffs.get(vec, 0) and o is not opds[0]):
                continue
            block = self.spec.block_elements(np.dtype(o.dtype).itemsize)
            if o.base.const % block or any(c % block for _v, c in o.base.terms) or \
                    any(o.coeffs.get(v, 0) % block for v, _e in rest):
                raise _NotDense()

    def _bind(self, opd: Opd, rest, names) -> Opd:
        isa = self.isa
        base = opd.base
        for v, _ in rest:
            c = opd.coeffs.get(v, 0)
            if c:
                base = base + isa.var(names[v]) * c
        return Opd(opd.kind, opd.dtype, opd.value, opd.buffer, base, {}, opd.slot)

    def elementwise(self, nest, dst, vec, where) -> list:
        store = nest.store
        loads = [self.operand(l, nest.loops) for l in _loads(store.value)]
        for o in loads:
            c = o.coeffs.get(vec, 0) if vec is not None else 0
            if c not in (0, 1):
                raise NpuMappingError(f"{where}: operand of '{o.buffer.name}' is strided along the vector loop "
                                      f"(a transpose or a strided access: not supported yet)")
        values = _value_vars(store.value)
        n, merged, rest = self._geometry(nest.loops, vec, [dst, *loads], keep=values)
        self._dense_ok(rest, vec, [dst, *loads])
        rest = self._rows_inside(rest, n, dst, loads, store, where)
        rows = self._rows(rest, vec, n, [dst, *loads])
        if rows:
            return self._elementwise_rows(nest, dst, loads, vec, n, merged, rest, rows, where)
        names = {v: self.tr.fresh("v") for v, _ in rest}
        emit = _Emitter(self, n, where)
        emit.outer_index = [(v, e, self.isa.var(names[v]), 0) for v, e in rest if any(v.same_as(w) for w in values)]
        opmap = {}
        for l, o in zip(_loads(store.value), loads):
            opmap[_key(l)] = (self._bind(o, rest, names), o.coeffs.get(vec, 0) if vec is not None else 0)
        dstb = self._bind(dst, rest, names)
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        emit.evaluate(store.value, opmap, dstb)
        return self._wrap(emit.records, rest, names)

    def _rows_inside(self, rest, n, dst, loads, store, where) -> list:
        """The outer loops of an element-wise statement with a loop its destination does not
        index innermost (an update `acc += X * W` over a window or a summed dim): an output
        loop moved inside them, so that its rows fold into repeats (`_rows`). Each element's
        updates keep their order: the statement writes only its destination, which it reads at
        the element it writes, the loops moved over do not index it, and the rows of the moved
        loop are disjoint (destination stride at least a row)."""
        if not self.tr.fold_rows or not rest or dst.coeffs.get(rest[-1][0], 0) >= n:
            return rest
        store_forms = [_affine(i, where) for i in store.indices]
        for ld in _loads(store.value):
            if ld.source.same_as(store.buffer) and [_affine(i, where) for i in ld.indices] != store_forms:
                return rest
        found = [k for k, (v, e) in enumerate(rest) if e > 1 and dst.coeffs.get(v, 0) >= n and
                 all(o.coeffs.get(v, 0) >= 0 for o in loads) and
                 not any(dst.coeffs.get(w, 0) for w, _f in rest[k + 1:])]
        if not found:
            return rest
        k = found[-1]
        return rest[:k] + rest[k + 1:] + [rest[k]]

    ROW_TEMP_BYTES = 16384  # a temp of rows x row elements at most this large
    ROW_TEMP_BYTES_LARGE = 65536  # tried first (fewer, longer instructions), while the region fits the UB

    def _rows(self, rest, vec, n, opds) -> int:
        """Rows of the innermost outer loop to fold into repeats (a divisor of its extent, at
        most max_repeat and temps of ROW_TEMP_BYTES), 0 when the operands' row strides are not
        whole 32-byte blocks (each op then still picks its cheapest form: `_Emitter._rows_op`)."""
        if vec is None or not rest:
            return 0
        u, R = rest[-1]
        if not self.tr.fold_rows or R < 2 or opds[0].coeffs.get(u, 0) < n:
            return 0  # rows that share destination elements (a reduction loop)
        for o in opds:
            c = o.coeffs.get(u, 0)
            block = self.spec.block_elements(np.dtype(o.dtype).itemsize)
            if c < 0 or (o.coeffs.get(vec, 0) and c % block):
                return 0
        row_bytes = -(-n // 8) * 8 * 4
        cap = min(self.spec.max_repeat, max(self.tr.row_temp_bytes // row_bytes, 1))
        fits = [d for d in divisors_upto(R, cap)]
        best = max(fits) if fits else 1
        return best if best >= 2 else 0

    def _elementwise_rows(self, nest, dst, loads, vec, n, merged, rest, rows, where) -> list:
        isa = self.isa
        store = nest.store
        u, R = rest[-1]
        groups = R // rows
        outer = rest[:-1] + ([(u, groups)] if groups > 1 else [])
        names = {v: self.tr.fresh("v") for v, _ in outer}

        def bind(o):
            b = o.base
            for v, _e in rest[:-1]:
                c = o.coeffs.get(v, 0)
                if c:
                    b = b + isa.var(names[v]) * c
            c = o.coeffs.get(u, 0)
            if groups > 1 and c:
                b = b + isa.var(names[u]) * (c * rows)
            return Opd(o.kind, o.dtype, o.value, o.buffer, b, {}, o.slot, row=c)

        emit = _Emitter(self, n, where)
        emit.rows = rows
        values = _value_vars(store.value)
        for v, e in rest:
            if any(v.same_as(w) for w in values):
                if v.same_as(u):
                    emit.outer_index.append((v, e, isa.var(names[u]) * rows if groups > 1 else isa.Affine(), 1))
                else:
                    emit.outer_index.append((v, e, isa.var(names[v]), 0))
        opmap = {_key(l): (bind(o), o.coeffs.get(vec, 0)) for l, o in zip(_loads(store.value), loads)}
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        emit.evaluate(store.value, opmap, bind(dst))
        return self._wrap(emit.records, outer, names)

    def _wrap(self, records, rest, names) -> list:
        if not rest:
            return records
        isa = self.isa
        instrs = [r[1] for r in records]
        reads = set().union(*(set(r[2]) for r in records)) if records else set()
        writes = set().union(*(set(r[3]) for r in records)) if records else set()
        body = tuple(instrs)
        for v, e in reversed(rest):
            body = (isa.Loop(names[v], e, body),)
        return [("acc", body[0], sorted(reads, key=str), sorted(writes, key=str))]

    def reduction(self, nest, dst, red, vec, where) -> list:
        op, src = red
        loads = [self.operand(l, nest.loops) for l in _loads(src)]
        for o in loads:
            if o.coeffs.get(vec, 0) not in (0, 1):
                raise NpuMappingError(f"{where}: a reduction over a strided operand of '{o.buffer.name}' "
                                      f"(not supported yet)")
        n, merged, rest = self._geometry(nest.loops, vec, [dst, *loads])
        if rest and dst.coeffs.get(rest[-1][0], 0) == 1:  # contiguous results: dst written as a vector
            if self.tr.dense:
                raise _NotDense()
            self._dense_ok(rest[:-1], vec, [dst])
            if self.tr.layout_mode == "live":
                self._dense_ok(rest, vec, [Opd("num", dst.dtype), *loads])
        else:
            self._dense_ok(rest, vec, [dst, *loads])
        if rest and dst.coeffs.get(rest[-1][0], 0) == 1:
            rows = self._reduction_rows(rest, vec, n, dst, loads)
            if rows:
                return self._reduce_rows(op, src, dst, loads, vec, n, merged, rest, rows, where)
        names = {v: self.tr.fresh("v") for v, _ in rest}
        opmap = {_key(l): (self._bind(o, rest, names), o.coeffs.get(vec, 0)) for l, o in zip(_loads(src), loads)}
        if rest and dst.coeffs.get(rest[-1][0], 0) == 1:
            # contiguous results (a row sum into a vector): each row folded to one repeat of
            # partials, then one reduce over all rows and one combine
            u, ue = rest[-1]
            outer = rest[:-1]
            isa = self.isa
            lanes = self._lanes(dst.dtype)
            part = self.temp(dst.dtype, 90, ue * lanes)
            emit = _Emitter(self, n, where)
            emit.index_vars = (vec,) if len(merged) == 1 else ()
            emit.ntemp[dst.dtype] = 0
            part_opd = Opd("ref", dst.dtype, buffer=part, base=isa.var(names[u]) * lanes, slot=(part.name, None))
            emit.fold(op, src, opmap, part_opd)
            records = self._wrap(emit.records, [(u, ue)], names)
            dsto = self._bind(dst, outer, names)
            res = self.temp(dst.dtype, 91, ue)
            block = self.spec.block_elements(np.dtype(dst.dtype).itemsize)
            start = 0
            while start < ue:
                r = min(ue - start, self.spec.max_repeat)
                records.append(("acc", isa.Vector(f"reduce_{op}", res.ref(start), (part.ref(start * lanes),), r,
                                                  min(n, lanes), src_strides=(isa.Stride(block, lanes),)),
                                [(part.name, None)], [(res.name, None)]))
                start += r
            final = _Emitter(self, ue, where)
            combine = {"sum": "add"}.get(op, op)
            final.op(combine, dsto, [(dsto, 1), (Opd("ref", dst.dtype, buffer=res, base=isa.Affine(),
                                                     slot=(res.name, None)), 1)])
            records += final.records
            return self._wrap(records, outer, names)
        dstb = self._bind(dst, rest, names)
        emit = _Emitter(self, n, where)
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        emit.reduce(op, src, opmap, dstb)
        return self._wrap(emit.records, rest, names)


    def _reduction_rows(self, rest, vec, n, dst, loads) -> int:
        """Rows of a row reduction (contiguous results: one value per row of the innermost
        outer loop) to fold into repeats together: a divisor R of the rows whose temps of R x n
        fit ROW_TEMP_BYTES, each group of R results starting a 32-byte block; 0 when the
        sources' row strides are not whole blocks."""
        if not self.tr.fold_rows or vec is None:
            return 0
        u, ue = rest[-1]
        for o in loads:
            c = o.coeffs.get(u, 0)
            block = self.spec.block_elements(np.dtype(o.dtype).itemsize)
            if c < 0 or (o.coeffs.get(vec, 0) and c % block):
                return 0
        size = np.dtype(dst.dtype).itemsize
        row_bytes = -(-n // 8) * 8 * 4
        cap = min(self.spec.max_repeat, max(self.tr.row_temp_bytes // row_bytes, 1))
        fits = [d for d in divisors_upto(ue, cap) if d == ue or (d * size) % self.spec.vector_block_bytes == 0]
        return max(fits) if fits and max(fits) >= 2 else 0

    def _reduce_rows_cost(self, n: int, rows: int, dtype: str) -> int:
        """Cycles of a group's partials and its `reduce_*` in the forms below (the cheaper of
        across and per row)."""
        spec, issue = self.spec, self.spec.vector_issue
        full, tail = divmod(n, self._lanes(dtype))
        across = max(full - 1, 1) * (issue + rows) + (issue + rows if tail else 0)
        per_row = rows * (spec.loop_cycles + issue + full + (issue + 1 if tail else 0))
        return (min(across, per_row) if full else 0) + issue + rows

    def _reduce_rows(self, op, src, dst, loads, vec, n, merged, rest, rows, where) -> list:
        """A row reduction over groups of `rows` rows at once: the source evaluated for all of
        them (`rows` mode), each row folded to one repeat of partials (vadd / vmax of its
        chunks across rows, or one `reduce_*_across` per row, whichever costs less), one
        `reduce_*` over the group (a value per row, the repeat's lanes reduced within it) and
        one combine into the results."""
        isa, spec = self.isa, self.spec
        dtype = dst.dtype
        combine = {"sum": "add"}.get(op, op)
        u, ue = rest[-1]
        groups = ue // rows
        outer = rest[:-1] + ([(u, groups)] if groups > 1 else [])
        names = {v: self.tr.fresh("v") for v, _ in outer}

        def bind(o, row: bool):
            b = o.base
            for v, _e in rest[:-1]:
                if o.coeffs.get(v, 0):
                    b = b + isa.var(names[v]) * o.coeffs[v]
            c = o.coeffs.get(u, 0)
            if groups > 1 and c:
                b = b + isa.var(names[u]) * (c * rows)
            return Opd(o.kind, o.dtype, o.value, o.buffer, b, {}, o.slot, row=c if row else 0)

        emit = _Emitter(self, n, where)
        emit.rows = rows
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        opmap = {_key(l): (bind(o, True), o.coeffs.get(vec, 0)) for l, o in zip(_loads(src), loads)}
        val = emit.as_ref(emit.evaluate(src, opmap, None), dtype)[0]
        records = emit.records
        lanes = self._lanes(dtype)
        full, tail = divmod(n, lanes)
        block = spec.block_elements(np.dtype(dtype).itemsize)
        cost = block_reduce_cost(spec, val, n, rows)
        blocked = cost is not None and cost < self._reduce_rows_cost(n, rows, dtype)
        if blocked:  # a row per block: reduce_*_across + reduce_*_block per eight rows
            _cost, instrs, res = block_reduce(isa, spec, op, val, n, rows, lambda elems: self.temp(dtype, 92, elems),
                                              lambda elems: self.temp(dtype, 93, elems))
            records += instrs
        elif full == 0:
            part, width = val, n
        else:
            width = lanes
            buf = self.temp(dtype, 92, rows * lanes)
            part = Opd("ref", dtype, buffer=buf, base=isa.Affine(), slot=(buf.name, None), row=lanes)
            issue = spec.vector_issue
            across = (max(full - 1, 1) * (issue + rows) + (issue + rows if tail else 0))
            per_row = rows * (spec.loop_cycles + issue + full + (issue + 1 if tail else 0))
            if per_row < across and full <= spec.max_repeat:
                var = self.tr.fresh("r")
                r = isa.var(var)
                pref = buf.ref(r * lanes)
                body = [isa.Vector(f"reduce_{op}_across", pref, (val.buffer.ref(val.base + r * val.row),), full)]
                if tail:
                    body.append(isa.Vector(combine, pref, (pref, val.buffer.ref(val.base + r * val.row + full * lanes)),
                                           1, tail))
                records.append(("acc", isa.Loop(var, rows, tuple(body)), [val.slot], [part.slot]))
            else:
                chunk = _Emitter(self, lanes, where)
                chunk.rows = rows

                def at(k):
                    return (Opd("ref", dtype, buffer=val.buffer, base=val.base + k * lanes, slot=val.slot,
                                row=val.row), 1)

                if full == 1:
                    chunk.op("mul", part, [at(0), (Opd("num", dtype, value=1), 0)])
                else:
                    chunk.op(combine, part, [at(0), at(1)])
                for k in range(2, full):
                    chunk.op(combine, part, [(part, 1), at(k)])
                if tail:
                    chunk.n = tail
                    chunk.op(combine, part, [(part, 1), at(full)])
                records += chunk.records
        if not blocked:
            res = self.temp(dtype, 93, rows)
            records.append(("acc", isa.Vector(f"reduce_{op}", res.ref(0), (part.buffer.ref(part.base),), rows, width,
                                              src_strides=(isa.Stride(block, part.row),)), [part.slot],
                            [(res.name, None)]))
        final = _Emitter(self, rows, where)
        dsto = bind(dst, False)
        final.op(combine, dsto, [(dsto, 1), (Opd("ref", dtype, buffer=res, base=isa.Affine(), slot=(res.name, None)), 1)])
        return self._wrap(records + final.records, outer, names)


class _Emitter:
    """Vector instructions over `n` elements (chunks of 256-byte repeats, the tail by mask)."""

    def __init__(self, comp: _Compute, n: int, where: str):
        self.c, self.isa, self.n, self.where = comp, comp.isa, n, where
        self.records = []
        self.ntemp = defaultdict(int)
        self.index_vars = ()  # loop vars whose values are the vector's element index
        self.outer_index = []  # (var, extent, base, row): outer loops whose index is a value (`loop_index`)
        self.rows = 0  # > 0: every op runs over that many rows, one repeat each
        self.memo = {}  # (expression text, dtype) -> its operand, computed once per statement

    def tmp(self, dtype: str) -> Opd:
        k = self.ntemp[dtype]
        self.ntemp[dtype] += 1
        if self.rows:
            block = self.c.spec.block_elements(np.dtype(dtype).itemsize)
            stride = -(-self.n // block) * block
            buf = self.c.temp(dtype, k, self.rows * stride)
            return Opd("ref", dtype, buffer=buf, base=self.isa.Affine(), slot=(buf.name, None), row=stride)
        buf = self.c.temp(dtype, k, self.n)
        return Opd("ref", dtype, buffer=buf, base=self.isa.Affine(), slot=(buf.name, None))

    def _src(self, o, contiguous: bool, offset: int):
        isa = self.isa
        if o[0].kind == "num":
            return o[0].value
        opd, c = o
        ref = opd.buffer.ref(opd.base + (offset if c else 0))
        return ref if c else isa.Bcast(ref)

    def op(self, name: str, dst: Opd, srcs: list, lanes_dtype=None):
        """dst = name(srcs) over n elements; srcs are (Opd, coeff) pairs. With `rows`: the
        same over that many rows (operands at their `row` strides, `_rows_op`)."""
        # lanes of the widest operand that is a vector (a broadcast is one scalar, as in the ISA)
        sizes = [np.dtype(dst.dtype).itemsize] + [np.dtype(o.dtype).itemsize for o, c in srcs if o.kind == "ref" and c]
        lanes = self.c.spec.vector_bytes // max(sizes)
        n = self.n
        reads = [s[0].slot for s in srcs if s[0].kind == "ref"]
        if self.rows:
            self._rows_op(name, dst, srcs, lanes, reads)
            return
        for instr in self._ranges(name, dst, srcs, n, lanes):
            self.records.append(("acc", instr, reads, [dst.slot]))

    def _rows_op(self, name: str, dst: Opd, srcs: list, lanes: int, reads: list) -> None:
        """`op` over `rows` rows of n elements, in the cheapest of three forms: one range over
        all rows when every operand's rows lie back to back (row stride n, broadcasts the same
        for every row); across rows (one instruction per repeat-wide chunk of the row, repeat =
        rows, operands at their row strides); per row (a loop over the rows, each one range)."""
        isa, spec, n, rows = self.isa, self.c.spec, self.n, self.rows
        back_to_back = dst.row == n and all(o.kind == "num" or (o.row == n if c else o.row == 0) for o, c in srcs)
        if back_to_back:
            for instr in self._ranges(name, dst, srcs, rows * n, lanes):
                self.records.append(("acc", instr, reads, [dst.slot]))
            return
        chunks = -(-n // lanes)
        across = chunks * (spec.vector_issue + rows)
        per_row = rows * (spec.loop_cycles + sum(spec.vector_issue + r for _s, r, _m in self._chunks(n, lanes)))
        blocked = block_rows_cost(spec, dst, srcs, n, rows)
        if blocked is not None and blocked < min(across, per_row):
            for instr in block_rows_op(isa, spec, name, dst, srcs, n, rows):
                self.records.append(("acc", instr, reads, [dst.slot]))
            return
        if per_row < across:
            var = self.c.tr.fresh("r")

            def at_row(o):
                return Opd(o.kind, o.dtype, o.value, o.buffer, o.base + isa.var(var) * o.row if o.kind == "ref" else None,
                           {}, o.slot)

            body = tuple(self._ranges(name, at_row(dst), [(at_row(o), c) for o, c in srcs], n, lanes))
            self.records.append(("acc", isa.Loop(var, rows, body), reads, [dst.slot]))
            return

        def blk(o):
            return spec.block_elements(np.dtype(o.dtype).itemsize)

        for start in range(0, n, lanes):
            mask = None if n - start >= lanes else n - start
            srcs_t, strides = [], []
            for o, c in srcs:
                if o.kind == "num":
                    srcs_t.append(o.value)
                    strides.append(None)
                elif c:
                    srcs_t.append(o.buffer.ref(o.base + start))
                    strides.append(isa.Stride(blk(o), o.row))
                else:
                    srcs_t.append(isa.Bcast(o.buffer.ref(o.base), 0, o.row))
                    strides.append(None)
            instr = isa.Vector(name, dst.buffer.ref(dst.base + start), tuple(srcs_t), rows, mask,
                               dst_stride=isa.Stride(blk(dst), dst.row), src_strides=tuple(strides))
            self.records.append(("acc", instr, reads, [dst.slot]))

    def _chunks(self, count: int, lanes: int) -> list:
        """(start, repeat, mask) of the instructions covering `count` contiguous elements:
        repeats of `lanes`, at most max_repeat each, the tail by mask."""
        full, tail = divmod(count, lanes)
        out, start = [], 0
        while full > 0:
            r = min(full, self.c.spec.max_repeat)
            out.append((start, r, None))
            start += r * lanes
            full -= r
        if tail:
            out.append((start, 1, tail))
        return out

    def _ranges(self, name: str, dst: Opd, srcs: list, count: int, lanes: int):
        """The instructions of `name` over `count` contiguous elements from each operand's base
        (broadcasts: one scalar for every lane)."""
        for start, repeat, mask in self._chunks(count, lanes):
            srcs_t = tuple(self._src(s, True, start) for s in srcs)
            yield self.isa.Vector(name, dst.buffer.ref(dst.base + start), srcs_t, repeat, mask)

    def as_ref(self, o, dtype: str):
        """An operand as a contiguous vector (numbers and broadcasts filled into a temp)."""
        opd, c = o
        if opd.kind == "ref" and c:
            return o
        t = self.tmp(dtype)
        if opd.kind == "num":
            self.op("dup", t, [(opd, 0)])
        else:
            self.op("dup", t, [o])
        return (t, 1)

    def evaluate(self, expr, opmap, dst: Opd | None):
        """Evaluate expr over n elements into dst (or a temp); returns the operand. A
        subexpression that occurs twice (`(x - mean) * (x - mean)`) is computed once: its
        temp is never reused within the statement."""
        if dst is not None or _is_load(expr) or type(expr).__name__ in ("IntImm", "FloatImm", "Var"):
            return self._evaluate(expr, opmap, dst)
        key = (str(expr), _dt(expr))
        if key not in self.memo:
            self.memo[key] = self._evaluate(expr, opmap, None)
        return self.memo[key]

    def _evaluate(self, expr, opmap, dst: Opd | None):
        from tvm import tirx

        dtype = _dt(expr)
        if dtype == "bool":
            return self._bool_value(expr, opmap, dst)
        if dtype not in NPU_DTYPES:
            raise NpuMappingError(f"{self.where}: a {dtype} value (not supported yet)")

        def into(res):
            """Make sure the result lands in dst when one is given."""
            if dst is None:
                return res
            opd, c = res
            if opd.kind == "ref" and c and opd.buffer is dst.buffer and opd.base == dst.base:
                return res
            if opd.kind == "ref" and opd.dtype != dst.dtype:
                self.op("cast", dst, [self.as_ref(res, opd.dtype)])
                return (dst, 1)
            if opd.kind == "num":
                self.op("dup", dst, [res])
            elif not c:
                self.op("dup", dst, [res])
            else:
                self.op("mul", dst, [res, (Opd("num", dtype, value=1), 0)])
            return (dst, 1)

        def target():
            return dst if dst is not None else self.tmp(dtype)

        if isinstance(expr, (tirx.FloatImm, tirx.IntImm)):
            return into((Opd("num", dtype, value=float(expr.value) if dtype != "int32" else int(expr.value)), 0))
        if _is_load(expr):
            return into(opmap[_key(expr)])
        if isinstance(expr, tirx.Cast) and _dt(expr.value) == "bool":
            return into(self.indicator(expr.value, opmap, dtype))
        if isinstance(expr, tirx.Cast):
            src = self.evaluate(expr.value, opmap, None)
            if _dt(expr.value) == dtype or src[0].dtype == dtype:
                return into(src)
            if src[0].kind == "num":
                return into((Opd("num", dtype, value=src[0].value), 0))
            small = self._cast_broadcast(src, dtype)
            if small is not None:
                return into(small)
            src = self.as_ref(src, src[0].dtype)
            t = target()
            self.op("cast", t, [src])
            return (t, 1)
        name = type(expr).__name__
        if name in _BINARY:
            a = self.evaluate(expr.a, opmap, None)
            b = self.evaluate(expr.b, opmap, None)
            op = _BINARY[name]
            if a[0].kind == "num" and b[0].kind == "num":
                val = {"add": a[0].value + b[0].value, "sub": a[0].value - b[0].value, "mul": a[0].value * b[0].value,
                       "max": max(a[0].value, b[0].value), "min": min(a[0].value, b[0].value)}.get(op)
                if val is None:
                    a = self.as_ref(a, dtype)
                else:
                    return into((Opd("num", dtype, value=val), 0))
            if op == "max" and b[0].kind == "num" and b[0].value == 0 and a[0].kind == "ref":
                a = self.as_ref(a, dtype)
                t = target()
                self.op("relu", t, [a])
                return (t, 1)
            if not a[1] and not b[1] and (a[0].kind == "ref" or b[0].kind == "ref"):
                pass  # both broadcast: fine, the result is a full vector
            t = target()
            self.op(op, t, [a, b])
            return (t, 1)
        if isinstance(expr, tirx.Var):
            return into(self.loop_index(expr))
        if name == "Select":
            return into(self.select(expr, opmap, dtype))
        if name == "Call" and expr.op.name.endswith("if_then_else"):
            return into(self.choose(expr.args[0], expr.args[1], expr.args[2], opmap, dtype))
        if name == "Call" and expr.op.name in _EXPANDED_CALLS:
            expanded = _EXPANDED_CALLS[expr.op.name](expr)
            if expanded is not None:
                return self.evaluate(expanded, opmap, dst)
        if name == "Call":
            opname = _UNARY_CALLS.get(expr.op.name)
            if opname is None:
                raise NpuMappingError(f"{self.where}: '{expr.op.name}' has no NPU vector instruction (not supported yet)")
            a = self.as_ref(self.evaluate(expr.args[0], opmap, None), dtype)
            t = target()
            self.op(opname, t, [a])
            return (t, 1)
        raise NpuMappingError(f"{self.where}: {name} has no NPU vector instruction (not supported yet)")

    def _cast_broadcast(self, src, dtype: str):
        """A broadcast operand (one value, or one per row) cast on its own values, not on a
        vector filled with them: the result is again a broadcast. None when the values do not
        start a 32-byte block (then the filled vector is cast)."""
        opd, c = src
        if opd.kind != "ref" or c:
            return None
        count = self.rows if self.rows and opd.row == 1 else 1 if not self.rows or opd.row == 0 else 0
        block = self.c.spec.block_elements(np.dtype(opd.dtype).itemsize)
        if not count or opd.base.const % block or any(k % block for _v, k in opd.base.terms):
            return None
        k = self.ntemp[dtype]
        self.ntemp[dtype] += 1
        buf = self.c.temp(dtype, k, count)
        out = Opd("ref", dtype, buffer=buf, base=self.isa.Affine(), slot=(buf.name, None), row=1 if count > 1 else 0)
        lanes = self.c.spec.vector_bytes // max(np.dtype(dtype).itemsize, np.dtype(opd.dtype).itemsize)
        for instr in self._ranges("cast", out, [(opd, 1)], count, lanes):
            self.records.append(("acc", instr, [opd.slot], [out.slot]))
        return (out, 0)

    def _range_op(self, op: str, dst_ref, srcs, count: int):
        """One vector op over `count` contiguous elements (repeats, the tail by mask)."""
        isa = self.isa
        lanes = self.c.spec.vector_bytes // np.dtype(dst_ref.buffer.dtype).itemsize
        full, tail = divmod(count, lanes)
        start = 0
        while full > 0 or tail:
            if full > 0:
                r, mask = min(full, self.c.spec.max_repeat), None
                full -= r
            else:
                r, mask, tail = 1, tail, 0
            shifted = tuple(x.buffer.ref(x.offset + start) if isinstance(x, type(dst_ref)) else x for x in srcs)
            yield isa.Vector(op, dst_ref.buffer.ref(dst_ref.offset + start), shifted, r, mask)
            start += r * lanes

    def iota(self, dtype: str, count: int = 0) -> Opd:
        """A UB buffer holding 0, 1, ..., count-1 (default n), made once per region before its
        statements (scalar moves for the first block, then doubling by vector adds)."""
        isa = self.isa
        count = count or self.n
        key = (dtype, count)
        buf = self.c.iotas.get(key)
        if buf is None:
            buf = self.c.tr.alloc(f"iota_{dtype}", (max(count, self.c._lanes(dtype)),), dtype)
            self.c.iotas[key] = buf
            slot = (buf.name, None)
            block = self.c.spec.block_elements(np.dtype(dtype).itemsize)
            for i in range(min(count, block)):
                self.c.prelude.append(("acc", isa.Scalar("mov", buf.ref(i), (float(i),)), [], [slot]))
            m = block
            while m < count:
                c = min(m, count - m)
                for instr in self._range_op("add", buf.ref(m), (buf.ref(0), float(m)), c):
                    self.c.prelude.append(("acc", instr, [slot], [slot]))
                m *= 2
        return Opd("ref", dtype, buffer=buf, base=isa.Affine(), slot=(buf.name, None))

    def loop_index(self, var):
        """The value of a loop index in the expression: along the vector loop an index vector;
        along an outer loop of the statement one element of an index vector of that loop's
        extent, read at the loop's own index (a broadcast: each instruction sees one value)."""
        if any(var.same_as(v) for v in self.index_vars):
            return (self.iota(_dt(var)), 1)
        for v, extent, base, row in self.outer_index:
            if var.same_as(v):
                opd = self.iota(_dt(var), extent)
                return (Opd("ref", opd.dtype, buffer=opd.buffer, base=base, slot=opd.slot, row=row), 0)
        raise NpuMappingError(f"{self.where}: loop index {var} as a value along a merged or outer loop "
                              f"(not supported yet)")

    # bool values: 0 / 1 in a float dtype

    _CMP = ("EQ", "NE", "LT", "LE", "GT", "GE")

    def _bool_value(self, expr, opmap, dst):
        """A bool expression into a bool tensor (float16 0 / 1) or a temp."""
        if _is_load(expr):
            res = opmap[_key(expr)]
        else:
            res = self.indicator(expr, opmap, dst.dtype if dst is not None else BOOL_AS)
        if dst is None:
            return res
        opd, c = res
        if opd.kind == "ref" and c and opd.buffer is dst.buffer and opd.base == dst.base:
            return res
        if opd.kind == "num" or not c:
            self.op("dup", dst, [res])
        elif opd.dtype != dst.dtype:
            self.op("cast", dst, [res])
        else:
            self.op("mul", dst, [res, (Opd("num", dst.dtype, value=1), 0)])
        return (dst, 1)

    def indicator(self, cond, opmap, dtype: str):
        """A bool expression as 0 / 1 in float `dtype`."""
        from tvm import tirx

        kind = type(cond).__name__
        one = (Opd("num", dtype, value=1.0), 0)
        if _is_load(cond):
            o = opmap[_key(cond)]
            if o[0].dtype == dtype:
                return o
            o = self.as_ref(o, o[0].dtype)
            t = self.tmp(dtype)
            self.op("cast", t, [o])
            return (t, 1)
        if isinstance(cond, (tirx.IntImm,)):
            return (Opd("num", dtype, value=float(bool(cond.value))), 0)
        if kind == "Not":
            a = self.as_ref(self.indicator(cond.a, opmap, dtype), dtype)
            t = self.tmp(dtype)
            self.op("sub", t, [one, a])
            return (t, 1)
        if kind in ("And", "Or"):
            a = self.as_ref(self.indicator(cond.a, opmap, dtype), dtype)
            b = self.indicator(cond.b, opmap, dtype)
            t = self.tmp(dtype)
            self.op("mul" if kind == "And" else "max", t, [a, b])
            return (t, 1)
        if isinstance(cond, tirx.Cast):  # x != 0
            cd = _dt(cond.value)
            return self._compare("NE", cond.value, tirx.const(0, cd), opmap, dtype)
        if kind in self._CMP:
            return self._compare(kind, cond.a, cond.b, opmap, dtype)
        if kind == "Call" and str(cond.op.name) in ("tirx.isnan", "tirx.isinf", "tirx.isfinite"):
            return self._classify(str(cond.op.name).split(".")[-1], cond.args[0], opmap, dtype)
        raise NpuMappingError(f"{self.where}: the bool value `{cond}` has no NPU vector mapping (not supported yet)")

    def _classify(self, test: str, arg, opmap, dtype: str):
        """isnan(x) as x != x (only NaN differs from itself), isinf(x) as |x| == inf and
        isfinite(x) as |x| < inf (false for NaN), each one `cmp_*` into a 0 / 1 temp."""
        xd = _dt(arg)
        if xd not in ("float16", "float32"):
            return (Opd("num", dtype, value=float(test == "isfinite")), 0)  # integers: finite, never NaN
        x = self.as_ref(self.evaluate(arg, opmap, None), xd)
        t = self.tmp(dtype)
        if test == "isnan":
            self.op("cmp_ne", t, [x, x])
            return (t, 1)
        a = self.tmp(xd)
        self.op("abs", a, [x])
        self.op("cmp_eq" if test == "isinf" else "cmp_lt", t, [(a, 1), (Opd("num", xd, value=float("inf")), 0)])
        return (t, 1)

    def _cmp_operand(self, e, opmap):
        if type(e).__name__ == "Var":
            return self.loop_index(e)
        return self.evaluate(e, opmap, None)

    def _compare(self, kind, ea, eb, opmap, dtype: str):
        """a cmp b as 0 / 1 in `dtype`: one vector compare (`cmp_*`) into a condition temp."""
        a = self._cmp_operand(ea, opmap)
        b = self._cmp_operand(eb, opmap)
        if a[0].kind == "num" and b[0].kind == "num":
            va, vb = a[0].value, b[0].value
            res = {"EQ": va == vb, "NE": va != vb, "LT": va < vb, "LE": va <= vb, "GT": va > vb, "GE": va >= vb}[kind]
            return (Opd("num", dtype, value=float(res)), 0)
        refs = [o[0].dtype for o in (a, b) if o[0].kind == "ref"]
        cd = refs[0]
        if cd == "float16" and "float32" in refs:
            cd = "float32"
        a, b = (self._as_dtype(o, cd) for o in (a, b))
        t = self.tmp(dtype)
        self.op(f"cmp_{kind.lower()}", t, [a, b])
        return (t, 1)

    def _as_dtype(self, o, dtype: str):
        if o[0].kind == "num" or o[0].dtype == dtype:
            return o
        o = self.as_ref(o, o[0].dtype)
        t = self.tmp(dtype)
        self.op("cast", t, [o])
        return (t, 1)

    def choose(self, cond, tv_e, fv_e, opmap, dtype: str):
        """cond ? tv : fv: the condition into a 0 / 1 buffer (compares: `cmp_*`; not / and / or:
        1 - x, mul, max), then one `sel` per chunk; a lane reads only the branch it takes, so a
        NaN or inf in the other branch stays out."""
        if dtype not in NPU_DTYPES:
            raise NpuMappingError(f"{self.where}: a {dtype} select (not supported yet)")
        tv = self.evaluate(tv_e, opmap, None)
        fv = self.evaluate(fv_e, opmap, None)
        ind = self.indicator(cond, opmap, dtype)
        if ind[0].kind == "num":  # a constant condition
            return tv if ind[0].value else fv
        if tv[0].kind == "num" and fv[0].kind == "num" and (tv[0].value, fv[0].value) == (1.0, 0.0):
            return ind if ind[0].dtype == dtype else self._as_dtype(self.as_ref(ind, ind[0].dtype), dtype)
        tv, fv = self._as_dtype(tv, dtype), self._as_dtype(fv, dtype)
        t = self.tmp(dtype)
        self.op("sel", t, [self.as_ref(ind, ind[0].dtype), tv, fv])
        return (t, 1)

    def select(self, expr, opmap, dtype: str):
        """select(cond, tv, fv): as `choose`."""
        return self.choose(expr.condition, expr.true_value, expr.false_value, opmap, dtype)

    def fold(self, op: str, src, opmap, part: Opd):
        """part[0:lanes] = src folded lane-wise across its repeats (the first n lanes when
        n is shorter than a repeat)."""
        isa = self.isa
        dtype = part.dtype
        combine = {"sum": "add"}.get(op, op)
        val = self.as_ref(self.evaluate(src, opmap, None), dtype)[0]
        lanes = self.c.spec.vector_bytes // np.dtype(dtype).itemsize
        full, tail = divmod(self.n, lanes)
        pref = part.buffer.ref(part.base)
        if full == 0:
            self.records.append(("acc", isa.Vector("mul", pref, (val.buffer.ref(val.base), 1), 1, tail),
                                 [val.slot], [part.slot]))
            return
        start, first = 0, True
        while full > 0:
            r = min(full, self.c.spec.max_repeat)
            if first:
                self.records.append(("acc", isa.Vector(f"reduce_{op}_across", pref, (val.buffer.ref(val.base),), r),
                                     [val.slot], [part.slot]))
            else:
                t = self.tmp(dtype)
                self.records.append(("acc", isa.Vector(f"reduce_{op}_across", t.buffer.ref(t.base),
                                                       (val.buffer.ref(val.base + start),), r), [val.slot], [t.slot]))
                self.records.append(("acc", isa.Vector(combine, pref, (pref, t.buffer.ref(t.base))),
                                     [part.slot, t.slot], [part.slot]))
            first = False
            start += r * lanes
            full -= r
        if tail:
            self.records.append(("acc", isa.Vector(combine, pref, (pref, val.buffer.ref(val.base + start)), 1, tail),
                                 [part.slot, val.slot], [part.slot]))

    def reduce(self, op: str, src, opmap, dst: Opd):
        """dst = dst op reduce(src over n)."""
        isa = self.isa
        dtype = dst.dtype
        combine = {"sum": "add"}.get(op, op)
        val = self.evaluate(src, opmap, None)
        val = self.as_ref(val, dtype)
        opd = val[0]
        lanes = self.c.spec.vector_bytes // np.dtype(dtype).itemsize
        n = self.n
        full, tail = divmod(n, lanes)
        part = opd
        reads = [opd.slot]
        if full > 1 or (full == 1 and tail):
            acc = self.tmp(dtype)
            start, first = 0, True
            while full > 0:
                r = min(full, self.c.spec.max_repeat)
                target_ = acc if first else self.tmp(dtype)
                self.records.append(("acc", isa.Vector(f"reduce_{op}_across", target_.buffer.ref(target_.base),
                                                       (opd.buffer.ref(opd.base + start),), r), reads, [target_.slot]))
                if not first:
                    self.records.append(("acc", isa.Vector(combine, acc.buffer.ref(acc.base),
                                                           (acc.buffer.ref(acc.base), target_.buffer.ref(target_.base))),
                                         [acc.slot, target_.slot], [acc.slot]))
                first = False
                start += r * lanes
                full -= r
            if tail:
                self.records.append(("acc", isa.Vector(combine, acc.buffer.ref(acc.base),
                                                       (acc.buffer.ref(acc.base), opd.buffer.ref(opd.base + start)),
                                                       1, tail), [acc.slot, opd.slot], [acc.slot]))
            part, mask = acc, lanes
        else:
            mask = n if n < lanes else None
        one = self.tmp(dtype)
        self.records.append(("acc", isa.Vector(f"reduce_{op}", one.buffer.ref(one.base), (part.buffer.ref(part.base),),
                                               1, mask), [part.slot], [one.slot]))
        self.records.append(("acc", isa.Vector(combine, dst.buffer.ref(dst.base),
                                               (dst.buffer.ref(dst.base), one.buffer.ref(one.base)), 1, 1),
                             [dst.slot, one.slot], [dst.slot]))


# --- the backend ---------------------------------------------------------------------------------------


MAX_DYNAMIC = 2_000_000  # dynamic instructions (all blocks): beyond this a vector mapping is hopeless


def _dynamic_count(body) -> int:
    from akg.backends.npu import isa

    n = 0
    for x in body:
        n += x.trip * (1 + _dynamic_count(x.body)) if isinstance(x, isa.Loop) else 1
    return n


@dataclass
class NpuExecutable:
    program: object
    spec_json: str
    outputs: tuple[int, ...]  # kernel argument positions the program writes

    @property
    def spec(self):
        from akg.backends.npu.spec import NpuSpec

        return NpuSpec.from_json(self.spec_json)


def translate(func, target, double_buffer: bool | None = None):
    """The isa.Program of a PrimFunc lowered for `target` (an NpuTarget)."""
    spec = target.spec
    name = str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs else "kernel"
    db = getattr(target, "_double_buffer", True) if double_buffer is None else double_buffer
    return Translator(func, spec, name, db).translate()


class NpuBackend(HostArrays, Backend):
    """TIR -> isa.Program, run by the NPU simulator (artifacts of kind "npu-sim")."""

    artifact_kind = ARTIFACT_KIND

    def compile(self, func, target, *, reciprocal: bool = True):
        from akg.backends.npu.check import check_program

        from akg.backends.npu.cube import has_contraction
        from akg.backends.npu.errors import NpuCapacityError

        contraction, in_dtype = has_contraction(func)
        on_cube = "npu.tile" in str(func.body) and ".k" in str(func.body)

        def refuse(why: str):
            name = str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs \
                else "kernel"
            if in_dtype == "float32":
                raise NpuCubePrecisionError(
                    f"{name}: fp32 matmul on the cube loses precision (its inputs would be cast to fp16; the fp32 "
                    f"reference tolerance is rtol 1e-5), and the vector path is too large: {why}")
            raise NpuMappingError(f"{name}: a contraction the cube does not take (operands not fp16 or not in "
                                  f"whole 16 x 16 fractals: partial tiles are refused) and the vector path is too "
                                  f"large: {why}")

        program = translate(func, target)
        spec = target.spec
        dynamic = _dynamic_count(program.body) * program.blocks
        if dynamic > MAX_DYNAMIC:
            if contraction and not on_cube:
                refuse(f"{dynamic} instructions (> {MAX_DYNAMIC})")
            raise NpuMappingError(
                f"{program.name}: the mapping needs {dynamic} instructions (> {MAX_DYNAMIC})")
        try:
            check_program(program, spec)  # capacity (a ScheduleError), alignment, bounds, paths
        except NpuCapacityError as e:
            if contraction and not on_cube:
                refuse(str(e))
            raise
        n = len(func.params)
        written = set()
        for i, p in enumerate(func.params):
            written.add(i)
        return NpuExecutable(program, spec.to_json(), tuple(range(n)))

    def export(self, executable) -> Artifact:
        return Artifact(self.artifact_kind, pickle.dumps(executable))

    def load(self, artifact: Artifact):
        if artifact.kind != self.artifact_kind:
            raise CompileError(f"an artifact of kind '{artifact.kind}' is not an npu-sim program")
        return pickle.loads(artifact.data)

    def source(self, executable, kind: str = "asm") -> str:
        return "; npu-sim program (simulated NPU, not real hardware)\n" + executable.program.listing()

    def entry(self, executable) -> Callable:
        from akg.backends.npu.sim import simulate

        program, spec = executable.program, executable.spec
        n_args = len(program.params)

        def run(*arrays):
            args = [np.asarray(a).reshape(p.shape) for p, a in zip(program.params, arrays)]
            args = [a.astype(p.dtype) if a.dtype == np.bool_ else a for p, a in zip(program.params, args)]
            args += [None] * (n_args - len(args))
            result = simulate(program, spec, args, functional=True, races=False)
            for p, a in zip(program.params, arrays):
                out = result.outputs[p.name]
                if a.dtype == np.bool_:
                    out = out != 0  # bool as float16 0 / 1
                if a.dtype != out.dtype or a.size != out.size:
                    raise CompileError(f"npu-sim: argument '{p.name}' is {a.dtype}{list(a.shape)}, the program "
                                       f"takes {out.dtype}{list(out.shape)}")
                np.copyto(a, out.reshape(a.shape))
            executable.last_report = result.report

        return run

    def measure(self, executable, tensors, *, number: int = 1, repeat: int = 1) -> list[float]:
        from akg.backends.npu.sim import simulate

        report = simulate(executable.program, executable.spec, functional=False, races=False).report
        return [float(report.cycles)] * max(repeat, 1)

    def report(self, executable, races: bool = False):
        from akg.backends.npu.sim import simulate

        return simulate(executable.program, executable.spec, functional=races, races=races).report

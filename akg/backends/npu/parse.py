"""The parsed TIR of the NPU backend: a lowered function's body as top loops (`TopLoop`), tile
regions (`Region`) and, in a region, statements with their loops (`Nest`) or loops that
cannot be distributed over their statements (`Serial`); the parser, the region and tile loops
it splits or reverses so that every index is affine, and helpers on loads and stores."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from akg.backends.npu.affine import (_FLATS, _LOOP_RANGES, _LOOP_SPLITS, _affine, _buf, _divided_terms, _divisions,
                                     _index_vars)
from akg.backends.npu.errors import NpuMappingError, NpuUnsupportedError


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
            raise NpuUnsupportedError(f"{name}: a guarded statement (if {s.condition}) is not supported yet")
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


def _dt(e) -> str:
    return str(e.ty.dtype)


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


def _key(load) -> tuple:
    return (load.source.name, tuple(str(i) for i in load.indices))

"""The NPU backend's translation of a lowered function into an `isa.Program` (`Translator`): the
parsed TIR's top loops become blocks and `Loop`s (tile loops in pairs under double buffering),
each tile region its UB boxes, its GM <-> UB DMAs and its statements as vector (or cube)
instructions, with the syncs between pipes."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from akg.backends.npu.affine import (_FLATS, _LOOP_RANGES, _LOOP_SPLITS, _access_forms, _affine, _bounds_test, _buf,
                                     _is_load, _same_coeffs)
from akg.backends.npu.boxes import Local, Window, _Flat
from akg.backends.npu.dmas import box_dmas
from akg.backends.npu.errors import NpuMappingError, NpuUnsupportedError
from akg.backends.npu.parse import Nest, Region, TopLoop, _dt, _loads, _mark_parts, _nests, _parse_top
from akg.backends.npu.reuse import drop_recomputed, fold_initial_values
from akg.backends.npu.syncs import HALF, Compound, SyncPass, _compound
from akg.backends.npu.vector import _Compute, _NotDense
from akg.backends.npu.vector_emit import NPU_DTYPES, _npu_dtype


@dataclass
class _Access:
    """A tensor access by name and indices (what `_access_forms` looks up)."""

    name: str
    indices: object

    @property
    def buffer(self):
        return self


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
            shape = tuple(int(s) for s in buf.shape)
            if any(n <= 0 for n in shape):
                raise NpuUnsupportedError(f"{self.name}: tensor '{buf.name}' has shape {shape}: zero-size tensors "
                                          f"are not supported on the NPU")
            if _npu_dtype(buf.dtype) not in NPU_DTYPES:
                raise NpuUnsupportedError(f"{self.name}: tensor '{buf.name}' is {buf.dtype}; the NPU computes in "
                                          f"{', '.join(NPU_DTYPES)} (not supported yet)")
            gm = isa.Buffer(isa.Scope.GM, self._ident(buf.name), shape or (1,), _npu_dtype(buf.dtype))
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
                raise NpuUnsupportedError(f"{self.name}: tensor '{name}' is {tir_buffer.dtype} (not supported yet)")
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
        state = (self.ub_offset, len(self.buffers), self.counter, len(self.workspaces))
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
        """Back to `state`: UB offset, local buffers, names and GM workspaces (a failed layout's
        are dropped; an intermediate's is made again by `_gm` when needed)."""
        self.ub_offset, self.counter = state[0], state[2]
        del self.buffers[state[1]:]
        dropped = {id(w) for w in self.workspaces[state[3]:]}
        del self.workspaces[state[3]:]
        for name in [n for n, b in self.params.items() if id(b) in dropped]:
            del self.params[name]

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
        """GM <-> UB copies of a box (`dmas.box_dmas`)."""
        return box_dmas(self, loc, gm, into, half)


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


class _Combined:
    """A tile loop split into pairs of tiles: tile = 2 * i + j."""

    def __init__(self, name: str, factor: int):
        self.name, self.factor = name, factor

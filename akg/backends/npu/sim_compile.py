"""The NPU simulator's compiled instructions: a checked `Program` turned into `_Op`s for one spec
(timing kind, pipe, cost, the byte regions each touches, the NumPy function that executes it),
and the work of one block counted from the static program. Used by `akg.backends.npu.sim`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from akg.backends.npu.check import LaneGeometry, vector_geometry
from akg.backends.npu.isa import (Dma, Img2col, Instr, Loop, Mmad, PipeBarrier, Program, Scalar, SetFlag, Vector,
                                  WaitFlag)
from akg.backends.npu.operands import PIPES, Affine, Bcast, Pipe, Ref, Scope
from akg.backends.npu.sim_l2 import _GmOp
from akg.backends.npu.spec import PATH_PIPES, NpuSpec

S, V, M, MTE1, MTE2, MTE3 = range(6)
PIPE_INDEX = {p: i for i, p in enumerate(PIPES)}
PIPE_NAMES = tuple(str(p) for p in PIPES)
LOOP, WORK, GMDMA, SCALAR, SET, WAIT, BARRIER = range(7)


# --- compiled instructions ---------------------------------------------------------------------


def _evaluator(aff: Affine) -> Callable[[dict], int]:
    const, terms = aff.const, aff.terms
    if not terms:
        return lambda env: const
    if len(terms) == 1:
        (name, coeff), = terms
        return lambda env: const + coeff * env[name]
    return lambda env: const + sum(c * env[v] for v, c in terms)


def _space(ref: Ref) -> str:
    return f"GM:{ref.buffer.name}" if ref.scope is Scope.GM else str(ref.scope)


def _base(ref: Ref) -> int:
    return 0 if ref.scope is Scope.GM else ref.buffer.offset


class _Access:
    """One region an instruction reads or writes: starts at byte `base + offset * itemsize`
    of its space and covers runs of `run` bytes at every combination of `dims`
    ((count, byte stride), outermost first)."""

    __slots__ = ("space", "write", "offset", "base", "itemsize", "dims", "run", "dense", "span")

    def __init__(self, ref: Ref, write: bool, dims, run: int):
        self.space, self.write = _space(ref), write
        self.offset, self.base, self.itemsize = _evaluator(ref.offset), _base(ref), ref.buffer.itemsize
        dims = sorted(((n, st) for n, st in dims if n > 1 and st > 0), key=lambda d: -d[1])
        while dims and dims[-1][1] == run:  # innermost dims contiguous with the run
            run *= dims.pop()[0]
        merged: list[tuple[int, int]] = []
        for n, st in reversed(dims):
            if merged and st == merged[-1][0] * merged[-1][1]:
                n0, st0 = merged.pop()
                merged.append((n0 * n, st0))
            else:
                merged.append((n, st))
        self.dims = tuple(reversed(merged))
        self.run = run
        self.dense = not self.dims
        self.span = sum((n - 1) * st for n, st in self.dims) + run

    def start(self, env) -> int:
        return self.base + self.offset(env) * self.itemsize

    def starts(self, lo: int) -> np.ndarray:
        starts = np.array([lo], np.int64)
        for n, st in self.dims:
            starts = (starts[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).ravel()
        return starts


def _overlap(a: _Access, a_lo: int, b: _Access, b_lo: int) -> bool:
    """Do the byte runs of two accesses (at their starts) intersect?"""
    if a.dense and b.dense:
        return a_lo < b_lo + b.span and b_lo < a_lo + a.span
    sa = np.sort(a.starts(a_lo))
    sb = b.starts(b_lo)
    idx = np.searchsorted(sa, sb - a.run, side="right")  # first a-run starting after y - a.run
    inside = idx < len(sa)
    return bool(np.any(inside & (sa[np.minimum(idx, len(sa) - 1)] < sb + b.run)))


class _Op:
    """An instruction prepared for the simulator: its timing kind, pipe and cost, the regions
    it touches and the NumPy function that executes it."""

    __slots__ = ("kind", "index", "instr", "pipe", "cost", "latency", "nbytes", "rate", "flag", "flag_id",
                 "barrier", "accesses", "run", "body", "trip", "var")

    def __init__(self, kind: int, index: int, instr: Instr, pipe: int = S):
        self.kind, self.index, self.instr, self.pipe = kind, index, instr, pipe
        self.cost = 0
        self.accesses: tuple[_Access, ...] = ()
        self.run = None
        self.flag = self.flag_id = self.barrier = self.body = None
        self.latency = self.nbytes = self.rate = self.trip = self.var = None

    def where(self, iteration=()) -> str:
        at = f" ({', '.join(f'{k}={v}' for k, v in iteration)})" if iteration else ""
        return f"instruction {self.index} `{self.instr}`{at}"


@dataclass
class _Totals:
    """Work of one block, counted from the static program (each instruction times its loops'
    trip counts)."""

    instructions: int = 0
    repeats: int = 0
    flops: int = 0
    gm_bytes: int = 0
    path_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATH_PIPES, 0))


def _view(mem, space: str, byte: int, shape, dtype, strides) -> np.ndarray:
    return np.ndarray(shape, dtype, mem[space], byte, strides)


def _constant(value) -> Callable:
    """A reader of a number operand."""
    return lambda env, mem: value


def _element(acc: _Access, dtype: np.dtype) -> Callable:
    """A reader of the single element an access starts at."""
    return lambda env, mem: _view(mem, acc.space, acc.start(env), (), dtype, ())[()]


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "max": np.maximum, "min": np.minimum}
UNARY = {"abs": np.abs, "exp": np.exp, "ln": np.log, "sqrt": np.sqrt,
         "rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "rec": np.reciprocal,
         "relu": lambda x: np.maximum(x, x.dtype.type(0)), "mov": lambda x: x}
COMPARE = {"cmp_eq": np.equal, "cmp_ne": np.not_equal, "cmp_lt": np.less, "cmp_le": np.less_equal,
           "cmp_gt": np.greater, "cmp_ge": np.greater_equal}
REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def _identity(reduction: str, dtype: np.dtype):
    if reduction == "sum":
        return dtype.type(0)
    info = np.iinfo(dtype) if dtype.kind == "i" else None
    if reduction == "max":
        return dtype.type(info.min if info else -np.inf)
    return dtype.type(info.max if info else np.inf)


def _reduce(reduction: str, x: np.ndarray, axis: int) -> np.ndarray:
    """Sums of float16 accumulate in float32 and round once; max and min are exact."""
    if reduction == "sum" and x.dtype == np.float16:
        return np.add.reduce(x, axis=axis, dtype=np.float32).astype(np.float16)
    return REDUCE[reduction].reduce(x, axis=axis)


class _Compiler:
    """Turns a checked program into `_Op`s for one spec, and counts the work of one block."""

    def __init__(self, program: Program, spec: NpuSpec):
        self.program, self.spec = program, spec
        self.totals = _Totals()
        self.gm_ops: list[_GmOp] = []
        self.block_vars = frozenset(program.block_env(0))
        self.trips = dict(program.block_trips())  # loop variables in scope -> trip counts
        self.body = self._body(program.body, 1, program.walk())

    def _body(self, instrs, mult: int, walk) -> list[_Op]:
        ops = []
        for instr in instrs:
            index, _depth, _instr, _loops = next(walk)
            if isinstance(instr, Loop):
                op = _Op(LOOP, index, instr)
                op.var, op.trip = instr.var, instr.trip
                self.trips[instr.var] = instr.trip
                op.body = self._body(instr.body, mult * instr.trip, walk)
                del self.trips[instr.var]
            else:
                op = self._instr(index, instr, mult)
                self.totals.instructions += mult
            ops.append(op)
        return ops

    def _instr(self, index: int, instr: Instr, mult: int) -> _Op:
        spec, totals = self.spec, self.totals
        if isinstance(instr, Dma):
            pipe = PIPE_INDEX[instr.pipe]
            gm = Scope.GM in (instr.src.scope, instr.dst.scope)
            op = _Op(GMDMA if gm else WORK, index, instr, pipe)
            op.latency, op.nbytes, op.rate = spec.dma_latency, instr.nbytes, spec.rate(instr.path)
            totals.path_bytes[instr.path] += mult * instr.nbytes
            op.accesses, op.run = self._dma(instr)
            if gm:  # its time depends on the other GM pipe and on the L2 (`_Timeline._gm`)
                totals.gm_bytes += mult * instr.nbytes
                write = instr.dst.scope is Scope.GM
                ref, acc = (instr.dst, op.accesses[1]) if write else (instr.src, op.accesses[0])
                size = ref.buffer.itemsize
                terms = tuple((v, c * size) for v, c in ref.offset.terms if v in self.block_vars)
                self.gm_ops.append(_GmOp(op, instr.path, write, mult, instr.nbytes, acc, terms))
            else:
                op.cost = op.latency + math.ceil(op.nbytes / op.rate)
        elif isinstance(instr, Vector):
            op = _Op(WORK, index, instr, V)
            op.cost = spec.vector_issue + instr.repeat
            totals.repeats += mult * instr.repeat
            op.accesses, op.run = self._vector(instr)
        elif isinstance(instr, Mmad):
            op = _Op(WORK, index, instr, M)
            m1, k1, n1 = instr.fractals(spec.fractal)
            op.cost = spec.cube_issue + m1 * k1 * n1
            totals.flops += mult * 2 * instr.m * instr.k * instr.n
            op.accesses, op.run = self._mmad(instr)
        elif isinstance(instr, Img2col):
            from akg.backends.npu import img2col

            img2col.check_img2col(f"kernel '{self.program.name}', instruction {index} `{instr}`", instr, spec,
                                  self.trips)
            op = _Op(WORK, index, instr, MTE1)
            op.cost = img2col.cost(instr, spec)
            totals.path_bytes[instr.path] += mult * instr.nbytes
            src_acc = _Access(instr.src, False, (), img2col.fmap_elements(instr) * 2)
            dst_acc = _Access(instr.dst, True, (), instr.nbytes)
            op.accesses = (src_acc, dst_acc)
            op.run = img2col.runner(instr, src_acc, dst_acc, _evaluator(instr.k_first))
        elif isinstance(instr, Scalar):
            op = _Op(SCALAR, index, instr, S)
            op.cost = spec.scalar_cycles * instr.ops
            op.accesses, op.run = self._scalar(instr)
        elif isinstance(instr, (SetFlag, WaitFlag)):
            op = _Op(SET if isinstance(instr, SetFlag) else WAIT, index, instr, PIPE_INDEX[instr.pipe])
            src, dst = PIPE_INDEX[instr.src], PIPE_INDEX[instr.dst]
            if instr.id.terms:
                op.flag, op.flag_id = (src, dst), _evaluator(instr.id)
            else:
                op.flag = (src, dst, instr.id.const)
        elif isinstance(instr, PipeBarrier):
            op = _Op(BARRIER, index, instr, S)
            op.barrier = tuple(range(1, 6)) if instr.barrier is Pipe.ALL else (PIPE_INDEX[instr.barrier],)
        else:  # pragma: no cover  (Instr has no other subclasses)
            raise TypeError(f"unknown instruction {instr!r}")
        return op

    # --- per instruction: regions and NumPy execution ------------------------------------------

    def _dma(self, instr: Dma):
        src, dst = instr.src, instr.dst
        ss, ds = src.buffer.itemsize, dst.buffer.itemsize
        src_acc = _Access(src, False, [(n, st * ss) for n, st in zip(instr.shape, instr.src_strides)], ss)
        dst_acc = _Access(dst, True, [(n, st * ds) for n, st in zip(instr.shape, instr.dst_strides)], ds)
        shape = instr.shape
        s_strides = tuple(st * ss for st in instr.src_strides)
        d_strides = tuple(st * ds for st in instr.dst_strides)
        s_dt, d_dt = np.dtype(src.dtype), np.dtype(dst.dtype)

        def run(env, mem):
            a = _view(mem, src_acc.space, src_acc.start(env), shape, s_dt, s_strides)
            b = _view(mem, dst_acc.space, dst_acc.start(env), shape, d_dt, d_strides)
            np.copyto(b, a, casting="unsafe")

        return (src_acc, dst_acc), run

    def _lane(self, ref: Ref, g: LaneGeometry, repeat: int, write: bool):
        """(access, reader(env, mem) -> (repeat, mask) array, writer(env, mem, values))."""
        size, dt = ref.buffer.itemsize, np.dtype(ref.dtype)
        rep, blk, mask, block = g.stride.repeat * size, g.stride.block * size, g.mask, g.block
        if g.dense:
            acc = _Access(ref, write, [(repeat, rep)], mask * size)
            shape, strides = (repeat, mask), (rep, size)

            def read(env, mem):
                return _view(mem, acc.space, acc.start(env), shape, dt, strides)

            def store(env, mem, values):
                _view(mem, acc.space, acc.start(env), shape, dt, strides)[...] = values

            return acc, read, store
        acc = _Access(ref, write, [(repeat, rep), (g.blocks, blk)], block * size)
        full, rem = divmod(mask, block)
        f_shape, f_strides = (repeat, full, block), (rep, blk, size)
        p_shape, p_strides = (repeat, rem), (rep, size)

        def read(env, mem):
            start = acc.start(env)
            parts = []
            if full:
                parts.append(_view(mem, acc.space, start, f_shape, dt, f_strides).reshape(repeat, full * block))
            if rem:
                parts.append(_view(mem, acc.space, start + full * blk, p_shape, dt, p_strides))
            return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

        def store(env, mem, values):
            start = acc.start(env)
            if full:
                _view(mem, acc.space, start, f_shape, dt, f_strides)[...] = \
                    values[:, :full * block].reshape(f_shape)
            if rem:
                _view(mem, acc.space, start + full * blk, p_shape, dt, p_strides)[...] = values[:, full * block:]

        return acc, read, store

    def _bcast(self, b: Bcast, repeat: int, mask: int):
        size, dt = b.ref.buffer.itemsize, np.dtype(b.ref.dtype)
        block = self.spec.block_elements(size)
        blocks = -(-mask // block)
        acc = _Access(b.ref, False, [(repeat, b.repeat * size), (blocks, b.block * size)], size)
        lane_block = np.arange(mask) // block
        shape, strides = (repeat, blocks), (b.repeat * size, b.block * size)

        def read(env, mem):
            return _view(mem, acc.space, acc.start(env), shape, dt, strides)[:, lane_block]

        return acc, read

    def _vector(self, instr: Vector):
        geo = vector_geometry(instr, self.spec)
        repeat, kind = instr.repeat, instr.kind
        dst_dt = np.dtype(instr.dst.dtype)
        num_dt = np.dtype(instr.number_dtype)
        accesses, readers = [], []
        for s, g in zip(instr.srcs, geo.srcs):
            if isinstance(s, Ref):
                acc, read, _ = self._lane(s, g, repeat, False)
            elif isinstance(s, Bcast):
                acc, read = self._bcast(s, repeat, geo.mask)
            else:
                value = np.asarray(s, num_dt)
                acc, read = None, _constant(value)
            if acc is not None:
                accesses.append(acc)
            readers.append(read)
        if kind in ("reduce", "reduce_block"):
            size = instr.dst.buffer.itemsize
            rs = geo.result_stride
            blocks = geo.srcs[0].blocks if kind == "reduce_block" else 1
            dst_acc = _Access(instr.dst, True, [(repeat, rs.repeat * size), (blocks, rs.block * size)], size)
            shape, strides = (repeat, blocks), (rs.repeat * size, rs.block * size)

            def store(env, mem, values):
                _view(mem, dst_acc.space, dst_acc.start(env), shape, dst_dt, strides)[...] = \
                    values.reshape(shape)
        else:
            rows = 1 if kind == "reduce_across" else repeat
            dst_acc, _, store = self._lane(instr.dst, geo.dst, rows, True)
        accesses.append(dst_acc)
        compute = self._vector_compute(instr, geo)

        def run(env, mem):
            store(env, mem, compute([r(env, mem) for r in readers]))

        return tuple(accesses), run

    def _vector_compute(self, instr: Vector, geo) -> Callable[[list], np.ndarray]:
        kind, op, dt = instr.kind, instr.op, np.dtype(instr.dst.dtype)
        shape = (instr.repeat, geo.mask)
        if kind == "binary":
            fn = BINARY[op]
            return lambda xs: fn(xs[0], xs[1])
        if kind == "unary":
            fn = UNARY[op]
            return lambda xs: fn(xs[0])
        if kind == "cast":
            return lambda xs: xs[0].astype(dt)
        if kind == "cmp":
            fn = COMPARE[op]
            return lambda xs: np.broadcast_to(fn(xs[0], xs[1]).astype(dt), shape)
        if kind == "select":
            return lambda xs: np.broadcast_to(np.where(xs[0] != 0, xs[1], xs[2]).astype(dt, copy=False), shape)
        if kind == "dup":
            return lambda xs: np.broadcast_to(xs[0], shape)
        reduction = op.split("_")[1]
        if kind == "reduce":
            return lambda xs: _reduce(reduction, xs[0], 1)
        if kind == "reduce_across":
            return lambda xs: _reduce(reduction, xs[0], 0)[None, :]
        block = geo.srcs[0].block
        blocks = geo.srcs[0].blocks
        pad = blocks * block - geo.mask
        fill = _identity(reduction, dt)

        def per_block(xs):
            x = xs[0]
            if pad:
                x = np.concatenate([x, np.full((x.shape[0], pad), fill, dt)], axis=1)
            return _reduce(reduction, x.reshape(x.shape[0], blocks, block), 2)

        return per_block

    def _mmad(self, instr: Mmad):
        m1, k1, n1 = instr.fractals(self.spec.fractal)
        side = self.spec.fractal
        frac = side * side
        a_acc = _Access(instr.a, False, (), m1 * k1 * frac * 2)
        b_acc = _Access(instr.b, False, (), k1 * n1 * frac * 2)
        c_size = instr.c.buffer.itemsize
        c_acc = _Access(instr.c, True, (), n1 * m1 * frac * c_size)
        accesses = [a_acc, b_acc, c_acc]
        if instr.accumulate is not False:  # an affine accumulate counts as a read every time
            accesses.insert(2, _Access(instr.c, False, (), n1 * m1 * frac * c_size))
        c_dt = np.dtype(instr.c.dtype)
        f16 = np.dtype(np.float16)
        flag = instr.accumulate
        accumulate = _evaluator(flag) if isinstance(flag, Affine) else (lambda env: flag)

        def run(env, mem):
            a = np.ndarray((m1, k1, side, side), f16, mem[a_acc.space], a_acc.start(env))
            b = np.ndarray((k1, n1, side, side), f16, mem[b_acc.space], b_acc.start(env))
            c = np.ndarray((n1, m1, side, side), c_dt, mem[c_acc.space], c_acc.start(env))
            a2 = a.transpose(0, 2, 1, 3).reshape(m1 * side, k1 * side).astype(np.float32)
            b2 = b.transpose(0, 3, 1, 2).reshape(k1 * side, n1 * side).astype(np.float32)
            # einsum, not BLAS: the same sums in the same order on every machine, and no BLAS
            # threads (which stall small products on a loaded host)
            product = np.einsum("ik,kj->ij", a2, b2)
            if accumulate(env):
                product += c.transpose(1, 2, 0, 3).reshape(m1 * side, n1 * side)
            c[...] = product.reshape(m1, side, n1, side).transpose(2, 0, 1, 3)

        return tuple(accesses), run

    def _scalar(self, instr: Scalar):
        if instr.op == "nop":
            return (), None
        dt = np.dtype(instr.dst.dtype)
        size = dt.itemsize
        getters, accesses = [], []
        for s in instr.srcs:
            if isinstance(s, Ref):
                acc = _Access(s, False, (), size)
                accesses.append(acc)
                getters.append(_element(acc, dt))
            else:
                value = dt.type(s)
                getters.append(_constant(value))
        dst_acc = _Access(instr.dst, True, (), size)
        accesses.append(dst_acc)
        fn = BINARY.get(instr.op) or UNARY[instr.op]

        def run(env, mem):
            value = fn(*[g(env, mem) for g in getters])
            _view(mem, dst_acc.space, dst_acc.start(env), (), dt, ())[...] = value

        return tuple(accesses), run

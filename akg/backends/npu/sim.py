"""The NPU simulator: `simulate(program, spec, args)` checks a program statically
(`check_program`), executes it in NumPy block by block, proves its synchronisation
race-free, and times it with a pipe model. docs/npu.md describes the model; in short:

- Functional: one NumPy operation per instruction over strided views of the scopes' memory
  (no Python loop per element); loops iterate at instruction granularity. Local buffers
  start every block filled with 0xFF bytes (NaN in float dtypes), so a kernel that reads what
  it never wrote computes NaN.
- Races: a vector clock per pipe; flags and barriers carry clocks between pipes. An access
  that overlaps an earlier access of another pipe (one of them a write) whose instruction its
  pipe has not synchronised with raises `NpuRaceError` naming both. Blocks touching the same
  GM bytes, one writing, are a race too (blocks cannot synchronise).
- Timing: the scalar unit dispatches instructions in program order into one queue per pipe
  (`queue_depth` deep); an instruction starts when it is dispatched, its pipe is free and the
  flags it waits on are set. Blocks run in waves of at most `cores` blocks; every block of a
  wave has the same timeline, and the HBM cap and the L2 rate are shared evenly by the wave's
  cores; on one core, MTE2 and MTE3 share that core's part in program order. GM reads go
  through a shared L2, computed analytically per GM DMA from its affine addresses: the bytes
  the wave's blocks read in common (and those the previous wave read, while its footprint fits
  the L2) are hits; only misses and writes use HBM. Loops whose pipe state repeats exactly
  from one iteration to the next are extrapolated (exact; off when tracing)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from akg.backends.npu.check import LaneGeometry, check_program, vector_geometry
from akg.backends.npu.errors import NpuRaceError, NpuSyncError
from akg.backends.npu.isa import (BLOCK_VAR, PIPES, Affine, Bcast, Dma, Img2col, Instr, Loop, Mmad, Pipe, PipeBarrier,
                                  Program, Ref, Scalar, Scope, SetFlag, Vector, WaitFlag)
from akg.backends.npu.report import SimReport, TraceEntry, Wave
from akg.backends.npu.spec import PATH_PIPES, NpuSpec, get_spec
from akg.errors import InputDataError

S, V, M, MTE1, MTE2, MTE3 = range(6)
PIPE_INDEX = {p: i for i, p in enumerate(PIPES)}
PIPE_NAMES = tuple(str(p) for p in PIPES)
LOOP, WORK, GMDMA, SCALAR, SET, WAIT, BARRIER = range(7)
STEADY_TRIES = 16  # iterations of a loop compared for a repeating state before giving up
PRUNE_AT = 48  # race records per space before records every pipe has synchronised with go


@dataclass(frozen=True)
class SimResult:
    """Every GM parameter after the run (by name; empty when not functional) and the report."""

    outputs: dict[str, np.ndarray]
    report: SimReport


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


# --- the entry point ---------------------------------------------------------------------------


def _gm_memory(program: Program, args) -> dict[str, np.ndarray]:
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        if len(args) > len(program.params):
            raise InputDataError(f"kernel '{program.name}' takes {len(program.params)} arguments, got {len(args)}")
        args = {p.name: a for p, a in zip(program.params, args)}
    unknown = set(args) - {p.name for p in program.params}
    if unknown:
        raise InputDataError(f"kernel '{program.name}' has no parameter(s) {', '.join(sorted(unknown))}")
    mem = {}
    for p in program.params:
        a = args.get(p.name)
        if a is None:
            array = np.zeros(p.shape, p.dtype)
        else:
            a = np.asarray(a)
            if a.size != p.size:
                raise InputDataError(f"kernel '{program.name}': parameter '{p.name}' has {p.size} elements "
                                     f"{p.shape}, the argument {a.size} {a.shape}")
            array = np.ascontiguousarray(a, dtype=p.dtype).reshape(p.shape).copy()
        mem[f"GM:{p.name}"] = array.reshape(-1).view(np.uint8)
    return mem


def simulate(program: Program, spec: NpuSpec | None = None,
             args: Sequence[np.ndarray | None] | Mapping[str, np.ndarray] | None = None, *,
             functional: bool = True, races: bool = True, trace: bool = False) -> SimResult:
    """Check `program` against `spec` (default "ascend910-like"), run it on `args` (arrays
    for its parameters in order or by name; missing ones start as zeros) and time it.
    `functional=False` skips the NumPy work (timing only, no outputs); `races=False` skips
    race detection; `trace` records when each instruction of the first block ran."""
    spec = spec or get_spec()
    marks = check_program(program, spec)
    code = _Compiler(program, spec)
    outputs: dict[str, np.ndarray] = {}
    if functional or races:
        mem = None
        if functional:
            mem = _gm_memory(program, args)
            local = {str(s): np.empty(max(marks[str(s)], 1), np.uint8)
                     for s in (Scope.L1, Scope.L0A, Scope.L0B, Scope.L0C, Scope.UB)}
            mem.update(local)
        tracker = _Races(code.body, program.blocks) if races else None
        with np.errstate(all="ignore"):
            for block in range(program.blocks):
                env = program.block_env(block)
                if mem is not None:
                    for buf in local.values():
                        buf.fill(0xFF)
                _execute(code.body, env, mem, tracker)
                if tracker is not None:
                    tracker.end_block(env)
        if tracker is not None:
            tracker.cross_block()
        if mem is not None:
            outputs = {p.name: mem[f"GM:{p.name}"].view(p.dtype).reshape(p.shape) for p in program.params}
    report = _report(program, spec, code, marks, trace)
    return SimResult(outputs, report)


def _report(program: Program, spec: NpuSpec, code: _Compiler, marks, trace: bool) -> SimReport:
    waves: list[Wave] = []
    busy, cycles = [0] * 6, 0
    traced = None
    hits = dict.fromkeys(PATH_PIPES, 0.0)
    timed: list[tuple[int, dict, _Timeline]] = []
    first = 0
    for count, size, l2 in _l2_waves(code, spec):
        # a wave times like an earlier one of its size that HBM never limited, if it misses no more
        timeline = next((tl for n, hbm, tl in timed if n == size and (hbm == l2.hbm or not tl.hbm_bound and all(
            u <= hbm.get(i, 1.0) for i, u in l2.hbm.items()))), None)
        if timeline is None or (trace and traced is None):
            timeline = _time_block(code, spec, first, size, trace and traced is None, l2.hbm)
            timed.append((size, l2.hbm, timeline))
        if timeline.trace is not None and traced is None:
            traced = tuple(TraceEntry(op.index, PIPE_NAMES[p], start, end, str(op.instr), it)
                           for op, p, start, end, it in timeline.trace)
        if waves and (waves[-1].blocks, waves[-1].cycles) == (size, timeline.cycles):
            waves[-1] = Wave(waves[-1].count + count, size, timeline.cycles)
        else:
            waves.append(Wave(count, size, timeline.cycles))
        cycles += count * timeline.cycles
        busy = [b + count * size * x for b, x in zip(busy, timeline.busy)]
        for path, n in l2.hits.items():
            hits[path] += count * n
        first += count * size
    blocks = program.blocks
    totals = code.totals
    flops, repeats, gm_bytes = totals.flops * blocks, totals.repeats * blocks, totals.gm_bytes * blocks
    l2_hits = {path: round(n) for path, n in hits.items()}
    hbm_bytes = gm_bytes - sum(l2_hits.values())
    return SimReport(
        kernel=program.name, spec=spec.key(), cycles=cycles, seconds=spec.seconds(cycles), blocks=blocks,
        waves=tuple(waves), pipe_busy=dict(zip(PIPE_NAMES, busy)),
        path_bytes={path: n * blocks for path, n in totals.path_bytes.items()},
        high_water=dict(marks), capacity={s: spec.capacity(s) for s in marks},
        instructions=totals.instructions * blocks, cube_flops=flops, vector_repeats=repeats, gm_bytes=gm_bytes,
        roofline=spec.roofline(flops, repeats * spec.vector_bytes, hbm_bytes, path_bytes=gm_bytes), trace=traced,
        l2_hit_bytes=l2_hits, hbm_bytes=hbm_bytes)

"""Graph -> Program: every basic op replaced by its compute definition, then injective
producers inlined into their consumers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from akg.errors import UnsupportedOpError
from akg.graph.compute.expr import (Call, ComputeOp, Const, Expr, Load, Reduce, Select, Tensor, cast, compute, const,
                                    placeholder, rebuild, size, substitute, walk)
from akg.graph.complex import complex_io, decompose_complex
from akg.graph.storage import widen_storage
from akg.graph.expand import expand
from akg.graph.ir import Graph, Value
from akg.graph.moments import one_read_moments
from akg.graph.ops import COMPUTES, ComputeCtx
from akg.graph.types import is_storage, is_uniform


@dataclass
class Program:
    """A kernel as tensor expressions: placeholders in, computed tensors out.

    `inputs` are the kernel's data arguments in graph-input order; `params` are the graph's
    non-trivial constants, also placeholders, bound to their data when the kernel is built.
    """

    name: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    params: dict[Tensor, np.ndarray] = field(default_factory=dict)
    complex_io: frozenset = frozenset()  # complex64 inputs/outputs, float32 (..., 2) here

    @property
    def placeholders(self) -> list[Tensor]:
        return [*self.inputs, *self.params]

    def ops(self) -> list[ComputeOp]:
        """Compute ops reachable from the outputs, producers before consumers."""
        order: list[ComputeOp] = []
        seen: set[int] = set()

        def visit(t: Tensor) -> None:
            stack = [(t, False)]
            while stack:
                tensor, done = stack.pop()
                op = tensor.op
                if op is None or (id(op) in seen and not done):
                    continue
                if done:
                    order.append(op)
                    continue
                seen.add(id(op))
                stack.append((tensor, True))
                for ld in loads_of(op):
                    if ld.tensor.op is not None and id(ld.tensor.op) not in seen:
                        stack.append((ld.tensor, False))

        for t in self.outputs:
            visit(t)
        return order

    def __str__(self) -> str:
        lines = [f"program {self.name}"]
        lines += [f"  input {t!r}" for t in self.placeholders]
        lines += [f"  {op!r}" for op in self.ops()]
        lines += [f"  output {t.name}" for t in self.outputs]
        return "\n".join(lines)


def loads_of(op: ComputeOp) -> list[Load]:
    return [n for n in walk(op.body) if isinstance(n, Load)]


def _uniform(a: np.ndarray) -> bool:
    """A constant that repeats one value (NaN included: a NaN scalar is one) is folded into the
    expressions, not a parameter."""
    return is_uniform(a)


def kernel_params(graph: Graph) -> list[np.ndarray]:
    """The arrays `lower_graph(graph)` binds as the kernel's parameters, in order, without
    building its expressions (a model's repeated kernels each bind their own weights)."""
    return [np.asarray(a) for a in widen_storage(decompose_complex(expand(graph))).constants.values()
            if not _uniform(a)]


def lower_graph(graph: Graph, window_phases: bool = True, vector_bits: int = 0, moments: bool = True) -> Program:
    """Expand composites, decompose complex values into float pairs, compute storage types
    (bfloat16, float8) in float32, take means and centred second moments from one read unless
    `moments` is False (`akg.graph.moments`; the target's `Target.one_read_moments`), then
    build each basic op's tensor expression (strided padded pools over phases of their input's
    columns unless `window_phases` is False: the target's `Target.window_phases`;
    `vector_bits`: the target's, for the op definitions that follow its vectors,
    `akg.graph.ops.conv.image_rows`). Neither changes the program's inputs or parameters."""
    complex_names = complex_io(graph)
    graph = widen_storage(decompose_complex(expand(graph)))
    if moments:
        graph = one_read_moments(graph)
    env: dict[Value, Tensor] = {}
    inputs = []
    for v in graph.inputs:
        env[v] = placeholder(v.shape, v.dtype, v.name)
        inputs.append(env[v])
    params: dict[Tensor, np.ndarray] = {}
    for v, a in graph.constants.items():
        if _uniform(a):
            value = a.flat[0].item() if a.size else 0
            if is_storage(v.dtype):  # exact in float32; stored by its bits (graph/compute/float8.py)
                env[v] = compute(v.shape, lambda *i, value=float(value), dt=v.dtype:
                                 cast(dt, const(value, "float32")), v.name)
                continue
            env[v] = compute(v.shape, lambda *i, value=value, dt=v.dtype: const(value, dt), v.name)
        else:
            env[v] = placeholder(v.shape, v.dtype, v.name)
            params[env[v]] = np.asarray(a)
    for node in graph.nodes:
        if node.op not in COMPUTES:
            raise UnsupportedOpError(node.op, reason="it has no compute definition")
        ctx = ComputeCtx(node.op, node.outputs[0].name, tuple(v.type for v in node.outputs), window_phases,
                         vector_bits)
        out = COMPUTES.get(node.op)(ctx, *(env[v] for v in node.inputs), **node.attrs)
        for v, t in zip(node.outputs, out if isinstance(out, tuple) else (out,)):
            env[v] = t
    outputs = []
    for v in graph.outputs:
        t = env[v]
        if t.op is None or t in outputs:  # an output needs its own buffer
            t = compute(t.shape, lambda *i, src=t: src[i], f"{v.name}.copy")
        outputs.append(t)
    return inline(Program(graph.name, inputs, outputs, params, complex_names))


# --- inlining -----------------------------------------------------------------------------------

SMALL_BODY = 24  # nodes; a producer this small is recomputed by each consumer


TRANSCENDENTAL = ("exp", "log", "erf", "tanh", "sigmoid", "sin", "cos", "pow")


def transcendental(op: ComputeOp) -> bool:
    """Bodies worth computing once and keeping (softmax's exp feeds both the sum and the
    division)."""
    return any(isinstance(n, Call) and n.op in TRANSCENDENTAL for n in walk(op.body))


EXPENSIVE = (*TRANSCENDENTAL, "sqrt", "rsqrt", "div", "mod")
BROADCAST_REUSE = 8  # a consumer reads each element of the producer this many times or more


def _expensive(body: Expr) -> bool:
    """Bodies costly enough per element that recomputing them for every element of a consumer
    that broadcasts them (layer_norm's per-row rsqrt, read by each of the row's elements) costs
    more than a small buffer."""
    return any(isinstance(n, Call) and n.op in EXPENSIVE for n in walk(body))


def _domain(op: ComputeOp) -> int:
    n = int(np.prod([a.extent for a in op.axes], dtype=np.int64))
    if isinstance(op.body, Reduce):
        n *= int(np.prod([a.extent for a in op.body.axes], dtype=np.int64))
    return n


def _guarded(op: ComputeOp) -> bool:
    """Bodies that select between a load and a fill value (padding): kept as buffers when
    read inside a reduction, so the reduction's inner loop carries no condition."""
    return any(isinstance(n, Select) for n in walk(op.body)) and any(isinstance(n, Load) for n in walk(op.body))


INTERLEAVE = 8  # a divisor of a consumer's innermost axis up to this reads its producer in phases


def _interleaved(op: ComputeOp, load: Load) -> bool:
    """Does `op` read `load` in phases of its innermost axis: an index that divides that axis,
    or takes it modulo, by a small constant (`INTERLEAVE`)? Its vector along the axis would
    read each phase's element, not a contiguous run (a depth-to-space of tiles: pixel x of a
    row from tile x // 2, phase x % 2)."""
    if not op.axes:
        return False
    inner = op.axes[-1]
    for index in load.indices:
        for n in walk(index):
            if (isinstance(n, Call) and n.op in ("floordiv", "floormod") and isinstance(n.args[1], Const)
                    and 1 < n.args[1].value <= INTERLEAVE and any(v is inner for v in walk(n.args[0]))):
                return True
    return False


def default_fusion(program: Program) -> str:
    """The fusion strategy of a kernel's default config: "smart", except for a program with a
    stage that another reads in phases of its innermost axis (`_interleaved`, kept by
    `inline`): "none", so that the stage keeps a loop nest of its own, vectorised along its own
    rows, instead of isl fusing it into its reader's loops, where it is computed element by
    element in the reader's order (Winograd's output tiles, read pixel by pixel: 1.2 ms fused,
    0.11 ms apart, ResNet's 56 px tiles)."""
    outputs = {id(t) for t in program.outputs}
    for op in program.ops():
        for ld in loads_of(op):
            if ld.tensor.op is not None and id(ld.tensor) not in outputs and _interleaved(op, ld):
                return "none"
    return "smart"


def inline(program: Program) -> Program:
    """Inline every injective (non-reduction) producer that is not a kernel output into its
    consumers, unless it is large and read several times, it is padding read by a reduction,
    it is costly and broadcast (its consumers would recompute each element many times), or it
    reads more than one element and a consumer reads it in phases of its innermost axis
    (`_interleaved`: inlined, each of the producer's loads would gather instead of loading a
    vector; kept, it is computed in vectors and only its own values are gathered)."""
    ops = program.ops()
    outputs = {id(t) for t in program.outputs}
    uses: dict[int, int] = {}
    reduce_readers: set[int] = set()
    phase_readers: set[int] = set()
    reader_domain: dict[int, int] = {}  # the largest iteration domain reading each tensor
    for op in ops:
        for ld in loads_of(op):
            uses[id(ld.tensor)] = uses.get(id(ld.tensor), 0) + 1
            reader_domain[id(ld.tensor)] = max(reader_domain.get(id(ld.tensor), 0), _domain(op))
            if isinstance(op.body, Reduce):
                reduce_readers.add(id(ld.tensor))
            if _interleaved(op, ld):
                phase_readers.add(id(ld.tensor))

    def inlinable(op: ComputeOp, body: Expr) -> bool:  # body: op's, its producers inlined
        t = op.output
        if id(t) in outputs or isinstance(op.body, Reduce):
            return False
        if id(t) in reduce_readers and _guarded(op):
            return False
        if reader_domain.get(id(t), 0) >= BROADCAST_REUSE * _domain(op) and _expensive(body):
            return False
        if id(t) in phase_readers and sum(isinstance(n, Load) for n in walk(body)) > 1:
            return False
        return uses.get(id(t), 0) <= 1 or (size(op.body) <= SMALL_BODY and not transcendental(op))

    new_body: dict[int, tuple[ComputeOp, Expr]] = {}  # old tensor id -> (old op, rewritten body)
    remap: dict[int, Tensor] = {}

    def rewrite(e: Expr) -> Expr:
        def fn(node: Expr):
            if not isinstance(node, Load):
                return None
            src = id(node.tensor)
            if src in new_body:
                old, body = new_body[src]
                return substitute(body, dict(zip(old.axes, node.indices)))
            if src in remap:
                return Load(remap[src], node.indices)
            return None
        return rebuild(e, fn)

    for op in ops:
        body = rewrite(op.body)
        if inlinable(op, body):
            new_body[id(op.output)] = (op, body)
        else:
            remap[id(op.output)] = ComputeOp(op.name, op.axes, body, op.output.layout).output
    return Program(program.name, program.inputs, [remap[id(t)] for t in program.outputs], program.params,
                   program.complex_io)


# --- reduction splitting ----------------------------------------------------------------------------


def split_reductions(program: Program, lanes: int) -> Program:
    """Rewrite each max/min reduction over one long axis as `lanes` partial reductions and a
    short final one: partial[.., l] = max_ro src(r = ro * lanes + l), out = max_l partial.

    The partial results form a vector, so the long loop vectorises; LLVM does not vectorise a
    floating-point max/min reduction on its own (it would have to assume no NaNs). Sums are
    left alone: with reassociation allowed, LLVM vectorises those itself.
    """
    if lanes < 2:
        return program

    def lanes_of(op, red) -> int:
        r = red.axes
        return lanes if (red.reducer in ("max", "min") and len(r) == 1 and r[0].extent % lanes == 0
                         and r[0].extent >= 4 * lanes) else 0

    return rfactor_reductions(program, lanes_of)


def rfactor_reductions(program: Program, lanes_of, blocked: bool = False) -> Program:
    """Each reduction for which `lanes_of(op, reduce)` gives lanes >= 2 (a divisor of its first
    reduction axis) as `lanes` partial reductions and a short final one:
    partial[.., l] = reduce_{ro, rest} src(first = ro * lanes + l, rest), out = reduce_l partial
    (the targets choose which reductions and how many lanes: CPU vector lanes, GPU threads).
    `blocked`: each partial reduces one contiguous block of the axis instead, and the partials
    are the leading dim: partial[l, ..] = reduce_{ro, rest} src(first = l * block + ro, rest)
    (a column sum's partials over blocks of rows, one per parallel chunk of a row loop)."""
    from akg.graph.compute.expr import reduce, reduce_axis

    remap: dict[int, Tensor] = {}

    def rewrite(e: Expr) -> Expr:
        return rebuild(e, lambda n: Load(remap[id(n.tensor)], n.indices)
                       if isinstance(n, Load) and id(n.tensor) in remap else None)

    for op in program.ops():
        red = op.reduce
        body = rewrite(op.body)
        lanes = lanes_of(op, red) if red is not None else 0
        if lanes >= 2:
            first, rest = red.axes[0], list(red.axes[1:])
            shape = [a.extent for a in op.axes]
            src = rewrite(red.source)

            def partial_body(*idx, op=op, first=first, rest=rest, src=src, lanes=lanes, reducer=red.reducer):
                block = first.extent // lanes
                ro = reduce_axis(block, f"{op.name}.ro")
                inner = [reduce_axis(r.extent, f"{op.name}.r{k}") for k, r in enumerate(rest)]
                if blocked:
                    mapping = dict(zip(op.axes, idx[1:]))
                    mapping[first] = idx[0] * block + ro
                else:
                    mapping = dict(zip(op.axes, idx[:-1]))
                    mapping[first] = ro * lanes + idx[-1]
                mapping.update(zip(rest, inner))
                return reduce(reducer, substitute(src, mapping), [ro, *inner])

            partial = compute([lanes, *shape] if blocked else [*shape, lanes], partial_body, f"{op.name}.partial")
            lane = reduce_axis(lanes, f"{op.name}.lane")
            remap[id(op.output)] = compute(shape, lambda *i, p=partial, lane=lane, reducer=red.reducer:
                                           reduce(reducer, p[(lane, *i) if blocked else (*i, lane)], [lane]),
                                           op.name)
        elif body is not op.body:
            remap[id(op.output)] = ComputeOp(op.name, op.axes, body, op.output.layout).output
    if not remap:
        return program
    outputs = [remap.get(id(t), t) for t in program.outputs]
    return Program(program.name, program.inputs, outputs, program.params, program.complex_io)


def split_column_reductions(program: Program, parts: int) -> Program:
    """Rewrite each reduction over the rows of a tensor (a column sum: the dgamma and dbeta of a
    layer-norm backward, a bias gradient) as `parts` partial reductions over contiguous blocks of
    rows and a short final one, where another op of the program reads the same tensor row by
    row: each partial then reads the rows of one block, which the scheduler can give the row
    loop's parallel chunk that reads them too (`polyhedral.row_partials`)."""
    if parts < 2:
        return program
    ops = program.ops()

    def downstream(op) -> set[int]:  # ops that read op's result, directly or not
        out = {id(op.output)}
        for other in ops:
            if any(id(ld.tensor) in out for ld in loads_of(other)):
                out.add(id(other.output))
        return out

    def parts_of(op, red) -> int:
        if len(red.axes) != 1 or red.reducer not in ("sum", "max", "min", "prod"):
            return 0
        r = red.axes[0]
        reads = [ld for ld in loads_of(op) if any(v is r for i in ld.indices for v in walk(i))]
        rows_only = all(ld.indices[0] is r and ld.tensor.ndim >= 2
                        and not any(v is r for i in ld.indices[1:] for v in walk(i)) for ld in reads)
        if not reads or not rows_only or r.extent % parts or r.extent // parts < 16:
            return 0
        # a row loop beside it that reads those rows, not one after it (a batch norm's output
        # needs its whole mean first). Not the op that writes them (the column sum of a gelu
        # gradient): isl already fuses the two, column-major, and one corpus kernel ran 4x
        # slower with its tanh in the row band's explicit vector loop
        after = downstream(op)
        tensors = {id(ld.tensor) for ld in reads}
        beside = any(other.axes and id(other.output) not in after and id(ld.tensor) in tensors
                     and ld.indices[0] is other.axes[0] for other in ops if other is not op
                     for ld in loads_of(other))
        return parts if beside else 0

    return rfactor_reductions(program, parts_of, blocked=True)

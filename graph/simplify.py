"""Simplification (graph stage between expansion and fusion): constant folding, algebraic
identities, common-subexpression elimination and dead-code elimination, each a pure pass
`Graph -> Graph` in `PASSES`, and `simplify` running them to a fixed point.

Every pass keeps the graph's inputs, and its outputs with their names and order.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from akg.graph.ir import Graph, Node, Value
from akg.graph.types import TensorType
from akg.graph.ops.layout import transpose_perm
from akg.registry import Registry

log = logging.getLogger(__name__)

# A folded result may hold this many elements, or as many as its inputs together: folding
# never turns a small constant into a large one (a broadcast of a scalar stays a broadcast).
FOLD_LIMIT = 1 << 12

COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "equal", "not_equal",
                         "logical_and", "logical_or"})
RESHAPES = frozenset({"reshape", "squeeze", "expand_dims"})
# reductions that, over axes of extent 1 only, return their input: the global pool of a 1x1
# image (a ResNet's head at 32 px input), a mean or sum over a kept axis of one
POINT_REDUCTIONS = frozenset({"sum", "mean", "max", "min", "prod", "global_avg_pool2d"})


@dataclass(frozen=True)
class SimplifyPass:
    """One registered simplification: a pure function from a graph to an equivalent graph."""

    name: str
    run: Callable[[Graph], Graph]
    doc: str = ""

    def __call__(self, graph: Graph) -> Graph:
        return self.run(graph)


PASSES: Registry[SimplifyPass] = Registry("simplification pass")

# The order `simplify` runs them in, each round: matmul_operands first, so that a transposed
# weight stays a weight with the product's transpose flag (as model files store linear layers)
# rather than being folded into a transposed copy.
PIPELINE = ("matmul_operands", "conv_taps", "fold_constants", "fold_scales", "identities", "canonical_attrs", "cse",
            "dce")


def defpass(name: str) -> Callable[[Callable[[Graph], Graph]], Callable[[Graph], Graph]]:
    """Register the decorated `Graph -> Graph` function as the pass `name`."""

    def wrap(fn: Callable[[Graph], Graph]) -> Callable[[Graph], Graph]:
        PASSES.register(name, SimplifyPass(name, fn, (fn.__doc__ or "").strip()))
        return fn

    return wrap


def simplify(graph: Graph, passes: Sequence[str] = PIPELINE, max_rounds: int = 16) -> Graph:
    """Run `passes` in order, again and again, until the graph stops changing."""
    steps = [PASSES.get(name) for name in passes]
    for round_ in range(1, max_rounds + 1):
        before = graph
        for step in steps:
            graph = step(graph)
        if graph == before:
            log.debug("simplify %s: fixed point after %d round(s)", graph.name, round_)
            return graph
    log.debug("simplify %s: still changing after %d rounds, stopping", graph.name, max_rounds)
    return graph


# --- rewriting ----------------------------------------------------------------------------------


@dataclass
class _Pending:
    """A node of the graph being built (inputs may still be substituted)."""

    op: str
    inputs: tuple[Value, ...]
    attrs: Any  # Attrs, or a plain mapping checked when the Node is made
    outputs: tuple[Value, ...]
    position: int  # index of the old node it stands for, to keep the graph's order


class _Rewriter:
    """The next graph, built while walking the old one: nodes kept or replaced, values
    substituted by equivalent values, constants added or dropped."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[_Pending] = []
        self.constants: dict[Value, np.ndarray] = dict(graph.constants)
        self.subst: dict[Value, Value] = {}
        self.producer: dict[Value, _Pending] = {}
        self.changes = 0
        self._position = 0
        self._taken: set[str] | None = None  # the names in use, once `fresh` is asked

    def fresh(self, base: str) -> str:
        """A value name not yet in the graph nor given out: `base`, or `base` with `_`s."""
        if self._taken is None:
            self._taken = {v.name for v in self.graph.values}
        name = base
        while name in self._taken:
            name += "_"
        self._taken.add(name)
        return name

    def walk(self) -> Iterable[Node]:
        """The old graph's nodes, in order; what is emitted meanwhile takes each one's place."""
        for i, node in enumerate(self.graph.nodes):
            self._position = i
            yield node

    def get(self, v: Value) -> Value:
        while v in self.subst:
            v = self.subst[v]
        return v

    def inputs(self, node: Node) -> list[Value]:
        return [self.get(v) for v in node.inputs]

    def const(self, v: Value) -> np.ndarray | None:
        return self.constants.get(self.get(v))

    def emit(self, op: str, inputs: Iterable[Value], attrs: Mapping[str, Any] | Any,
             outputs: Sequence[Value]) -> None:
        pending = _Pending(op, tuple(inputs), attrs, tuple(outputs), self._position)
        self.nodes.append(pending)
        for v in pending.outputs:
            self.producer[v] = pending

    def keep(self, node: Node) -> None:
        self.emit(node.op, self.inputs(node), node.attrs, node.outputs)

    def replace(self, old: Value, new: Value) -> None:
        """Uses of `old` become uses of `new` (an equivalent value of the same type)."""
        if old.type != new.type:
            raise AssertionError(f"internal: cannot replace {old!r} by {new!r}")
        self.subst[old] = new
        self.changes += 1

    def finish(self, pass_name: str) -> Graph:
        """The new graph. A replaced graph output keeps its name: its replacement is renamed,
        or (when that is an input, a constant or another output) copied or kept as it was."""
        alias: dict[Value, Value] = {}
        claimed = {v for v in self.graph.outputs if self.get(v) is v}
        extra: list[_Pending] = []
        position = {id(n): i for i, n in enumerate(self.graph.nodes)}
        done: set[Value] = set()
        for o in self.graph.outputs:
            r = self.get(o)
            if r is o or o in done:
                continue
            done.add(o)
            if r in self.producer and r not in claimed and r not in alias:
                alias[r] = o
                claimed.add(r)
            elif r in self.constants and o not in self.constants:
                self.constants[o] = self.constants[r]
            elif o not in self.constants:
                old = self.graph.producer(o)
                extra.append(_Pending(old.op, tuple(self.get(v) for v in old.inputs), old.attrs, old.outputs,
                                      position[id(old)]))

        def final(v: Value) -> Value:
            v = self.get(v)
            return alias.get(v, v)

        nodes = [Node(p.op, [final(v) for v in p.inputs], p.attrs, [alias.get(v, v) for v in p.outputs])
                 for p in sorted((*self.nodes, *extra), key=lambda p: p.position)]
        if self.changes:
            log.debug("%s on %s: %d rewrite(s)", pass_name, self.graph.name, self.changes)
        return Graph(self.graph.name, self.graph.inputs, self.graph.outputs, nodes, self.constants)


# --- constant folding ---------------------------------------------------------------------------


def _foldable(node: Node, ins: Sequence[Value]) -> bool:
    out = sum(v.type.size for v in node.outputs)
    return out <= max(FOLD_LIMIT, sum(v.type.size for v in ins))


@defpass("fold_constants")
def fold_constants(graph: Graph) -> Graph:
    """Evaluate ops whose inputs are all constants with the op's NumPy reference; the results
    become constants of the same names. Results larger than FOLD_LIMIT elements and than their
    inputs together (a broadcast of a scalar, an outer product) stay ops."""
    rw = _Rewriter(graph)
    for node in rw.walk():
        ins = rw.inputs(node)
        arrays = [rw.constants.get(v) for v in ins]
        if any(a is None for a in arrays) or not _foldable(node, ins):
            rw.keep(node)
            continue
        try:
            with np.errstate(all="ignore"):
                results = node.opdef.evaluate(arrays, node.attrs)
        except (IndexError, ValueError) as e:  # out-of-range indices stay a runtime error
            log.debug("not folding %r: %s", node, e)
            rw.keep(node)
            continue
        for v, r in zip(node.outputs, results):
            rw.constants[v] = np.asarray(r).astype(v.dtype, copy=False)
        rw.changes += 1
    return rw.finish("fold_constants")


# --- algebraic identities -----------------------------------------------------------------------


def _all(a: np.ndarray | None, value: int) -> bool:
    return a is not None and a.size > 0 and bool(np.all(a == value))


def _neutral_operand(rw: _Rewriter, node: Node, ins: list[Value]) -> Value | None:
    """x for x*1, 1*x, x+0, 0+x, x-0, x/1 (when the result has x's type)."""
    out = node.outputs[0]
    a, b = ins
    ca, cb = rw.constants.get(a), rw.constants.get(b)
    if node.op == "mul":
        candidates = [(a, cb, 1), (b, ca, 1)]
    elif node.op == "add":
        candidates = [(a, cb, 0), (b, ca, 0)]
    elif node.op == "sub":
        candidates = [(a, cb, 0)]
    elif node.op == "div":
        candidates = [(a, cb, 1)]
    else:
        return None
    for x, c, neutral in candidates:
        if x.type == out.type and _all(c, neutral):
            return x
    return None


def _is_identity_layout(node: Node, x: Value) -> bool:
    out = node.outputs[0]
    if out.type != x.type:
        return False
    op, attrs = node.op, node.attrs
    if op in RESHAPES or op in ("broadcast_to", "cast"):
        return True
    if op == "transpose":
        return transpose_perm(x.type.rank, attrs["perm"]) == tuple(range(x.type.rank))
    if op == "strided_slice":
        return all(s == 1 for s in attrs["strides"])
    if op in ("slice", "concat", "split"):
        return True  # same shape: the whole tensor (a single concat input, a single split part)
    if op == "pad":
        return not any(attrs["before"]) and not any(attrs["after"])
    return False


@defpass("identities")
def identities(graph: Graph) -> Graph:
    """x*1, x+0, x-0, x/1 -> x; cast to its own dtype, broadcast_to / reshape / squeeze /
    expand_dims to the same shape, identity transpose, full slice, zero pad, single concat ->
    the input; a reduction over axes of extent 1 (a global pool of a 1x1 image) -> the input,
    reshaped where the axes go; reshape-like of reshape-like -> one reshape; transpose of
    transpose -> one transpose with the composed permutation."""
    rw = _Rewriter(graph)
    for node in rw.walk():
        ins = rw.inputs(node)
        if len(node.outputs) != 1:
            rw.keep(node)
            continue
        out = node.outputs[0]
        if len(ins) == 2:
            x = _neutral_operand(rw, node, ins)
            if x is not None:
                rw.replace(out, x)
                continue
        if len(ins) == 1 and _is_identity_layout(node, ins[0]):
            rw.replace(out, ins[0])
            continue
        if len(ins) == 1 and node.op in POINT_REDUCTIONS and out.dtype == ins[0].dtype \
                and out.type.size == ins[0].type.size:
            # every reduced axis has extent 1 (the axes the reduction keeps are the input's)
            if out.type == ins[0].type:
                rw.replace(out, ins[0])
            else:
                rw.emit("reshape", [ins[0]], {"shape": list(out.shape)}, [out])
                rw.changes += 1
            continue
        inner = rw.producer.get(ins[0]) if ins else None
        if node.op in RESHAPES and inner is not None and inner.op in RESHAPES:
            source = inner.inputs[0]
            if source.type == out.type:
                rw.replace(out, source)
            else:
                rw.emit("reshape", [source], {"shape": list(out.shape)}, [out])
                rw.changes += 1
            continue
        if node.op == "transpose" and inner is not None and inner.op == "transpose":
            source = inner.inputs[0]
            rank = source.type.rank
            p1, p2 = transpose_perm(rank, inner.attrs["perm"]), transpose_perm(rank, node.attrs["perm"])
            perm = [p1[p] for p in p2]
            if perm == list(range(rank)):
                rw.replace(out, source)
            else:
                rw.emit("transpose", [source], {"perm": perm}, [out])
                rw.changes += 1
            continue
        rw.keep(node)
    return rw.finish("identities")


# --- one spelling per meaning ---------------------------------------------------------------------


def _canonical(node: Node, ins: Sequence[Value]) -> dict | None:
    """`node`'s attributes spelled one way where they have several (None: already so): a
    reshape's -1 as the size it stands for, a reduction's axes non-negative and sorted."""
    from akg.graph.ops.registry import REDUCE

    attrs = dict(node.attrs)
    if node.op == "reshape":
        attrs["shape"] = tuple(node.outputs[0].shape)
    elif node.opdef.kind == REDUCE and ins:
        rank = ins[0].type.rank
        if "axes" in attrs and attrs["axes"] is not None:
            attrs["axes"] = tuple(sorted({a % rank for a in attrs["axes"]})) if rank else attrs["axes"]
        if "axis" in attrs and rank:
            attrs["axis"] = attrs["axis"] % rank
    return None if attrs == dict(node.attrs) else attrs


@defpass("canonical_attrs")
def canonical_attrs(graph: Graph) -> Graph:
    """The same op spelled one way, so that two imports of one model give equal kernels (the
    same workload keys, so one tuning record serves both): a reshape's target shape with its
    -1 resolved, a reduction's axes non-negative and sorted, a constant of one element that
    an elementwise op broadcasts a scalar (`x * [0.25]` and `x * 0.25`), and the mean of an
    NCHW image over its rows and columns a `global_avg_pool2d`."""
    from akg.graph.ops.registry import ELEMWISE

    rw = _Rewriter(graph)
    scalars: dict[Value, Value] = {}
    for node in rw.walk():
        ins = rw.inputs(node)
        attrs = _canonical(node, ins)
        if node.op == "mean" and ins[0].type.rank == 4 and ins[0].dtype.startswith("float") and \
                (attrs or node.attrs)["axes"] == (2, 3):  # an NCHW image's mean: a global average pool
            rw.emit("global_avg_pool2d", ins, {"keepdims": node.attrs["keepdims"]}, node.outputs)
            rw.changes += 1
            continue
        if node.opdef.kind == ELEMWISE and len(ins) == 2 and len(node.outputs) == 1:
            for i, v in enumerate(ins):
                a = rw.constants.get(v)
                other = ins[1 - i]
                if a is None or a.size != 1 or a.ndim == 0 or other.type.shape != node.outputs[0].shape:
                    continue
                if v not in scalars:
                    name = rw.fresh(f"{v.name}.scalar")
                    scalars[v] = Value(name, TensorType((), v.dtype))
                    rw.constants[scalars[v]] = a.reshape(())
                ins[i] = scalars[v]
                attrs = dict(node.attrs) if attrs is None else attrs
        if attrs is None:
            rw.keep(node)
            continue
        rw.emit(node.op, ins, attrs, node.outputs)
        rw.changes += 1
    return rw.finish("canonical_attrs")


# --- matrix-product operands --------------------------------------------------------------------


def _swaps_last_two(node: _Pending | None) -> bool:
    """Whether `node` is a transpose that swaps the last two dims and nothing else."""
    if node is None or node.op != "transpose":
        return False
    rank = node.inputs[0].type.rank
    perm = transpose_perm(rank, node.attrs["perm"])
    return rank >= 2 and perm == (*range(rank - 2), rank - 1, rank - 2)


def _single_use(graph: Graph) -> set[Value]:
    """The values that one node reads and that are no graph output (rewriting their producer
    for that node leaves nothing else reading the old value)."""
    outputs = set(graph.outputs)
    return {v for v, users in graph.users().items() if len(users) == 1 and v not in outputs}


def _inner_last(node: _Pending | None, single: set[Value]) -> tuple[int, ...] | None:
    """For a transpose used only by a product whose permutation moves its source's last dim
    to the second-to-last place (a key transposed for attention, `(0, 2, 3, 1)`): the
    permutation `q` that keeps that dim last, so that the product reads `transpose(x, q)` with
    its transpose flag flipped (the way a model file writes `Q @ K^T`). None otherwise."""
    if node is None or node.op != "transpose" or node.outputs[0] not in single:
        return None
    rank = node.inputs[0].type.rank
    perm = transpose_perm(rank, node.attrs["perm"])
    if rank < 2 or perm[-2] != rank - 1 or perm[-1] == rank - 1:
        return None
    return (*perm[:-2], perm[-1], perm[-2])


def _merged_batch(node: _Pending | None, merged: Value) -> Value | None:
    """The source of `node` when it is a reshape-like that only merges the leading (batch)
    dims of its source into the first dim of `merged` (rank 3), the last two dims untouched."""
    if node is None or node.op not in RESHAPES or merged.type.rank != 3:
        return None
    source = node.inputs[0]
    shape = source.type.shape
    if len(shape) < 4 or shape[-2:] != merged.type.shape[-2:] or int(np.prod(shape[:-2])) != merged.type.shape[0]:
        return None
    return source


@defpass("matmul_operands")
def matmul_operands(graph: Graph) -> Graph:
    """Layout ops around matrix products folded into them, as frameworks' decompositions
    spell them out: a transpose of an operand's last two dims becomes the product's
    transpose flag, and so does the swap within a transpose that moves its source's last dim
    to the second-to-last place (`_inner_last`: ONNX exports of attention write K^T as one
    transpose); a batch_matmul of reshapes that merge the same leading batch dims
    (torch's matmul of 4-d tensors: view to 3-d, bmm, view back) becomes a batch_matmul over
    those dims, reshaped (and the reshape back then cancels in `identities`)."""
    single = _single_use(graph)
    rw = _Rewriter(graph)
    for node in rw.walk():
        if node.op not in ("matmul", "batch_matmul"):
            rw.keep(node)
            continue
        (a, b), out = rw.inputs(node), node.outputs[0]
        attrs = dict(node.attrs)
        batched = None
        if node.op == "batch_matmul":
            a4, b4 = _merged_batch(rw.producer.get(a), a), _merged_batch(rw.producer.get(b), b)
            if a4 is not None and b4 is not None and a4.type.shape[:-2] == b4.type.shape[:-2]:
                name = rw.fresh(f"{out.name}.batched")
                batched = Value(name, TensorType((*a4.type.shape[:-2], *out.type.shape[-2:]), out.type.dtype))
                a, b = a4, b4
        changed = batched is not None
        for key, operand in (("transpose_a", 0), ("transpose_b", 1)):
            producer = rw.producer.get((a, b)[operand])
            if _swaps_last_two(producer):
                attrs[key] = not attrs[key]
                a, b = (producer.inputs[0], b) if operand == 0 else (a, producer.inputs[0])
                changed = True
                continue
            inner = _inner_last(producer, single)
            if inner is not None:  # transpose(x, p) = swap_last_two(transpose(x, q)), q keeping x's last dim last
                name = rw.fresh(f"{(a, b)[operand].name}.rows")
                source = producer.inputs[0]
                shape = tuple(source.type.shape[i] for i in inner)
                moved = Value(name, TensorType(shape, source.type.dtype))
                rw.emit("transpose", [source], {"perm": list(inner)}, [moved])
                attrs[key] = not attrs[key]
                a, b = (moved, b) if operand == 0 else (a, moved)
                changed = True
        if not changed:
            rw.keep(node)
            continue
        rw.changes += 1
        if batched is None:
            rw.emit(node.op, [a, b], attrs, [out])
        else:
            rw.emit("batch_matmul", [a, b], attrs, [batched])
            rw.emit("reshape", [batched], {"shape": list(out.type.shape)}, [out])
    return rw.finish("matmul_operands")


# --- convolution taps that read only padding ----------------------------------------------------


def live_taps(size: int, out: int, k: int, stride: int, dilation: int, pad: int) -> tuple[int, int]:
    """First and last tap of a window axis that reads the input (not only padding) at some
    output position: tap t reads rows y * stride + t * dilation - pad, y in [0, out)."""
    live = []
    for t in range(k):
        base = t * dilation - pad  # the row output 0 reads: some y has 0 <= y * stride + base < size
        if max(0, -(base // stride)) <= min(out - 1, (size - 1 - base) // stride):
            live.append(t)
    return (live[0], live[-1]) if live else (0, k - 1)


@defpass("conv_taps")
def conv_taps(graph: Graph) -> Graph:
    """A conv2d with a constant weight whose first or last window rows (columns) read only
    padding at every output position becomes a conv2d over the taps that read the input, its
    weight sliced and its padding reduced by as much (same output). A 3x3 conv with padding 1
    on a 1x1 input is a 1x1 conv of the centre taps: it reads a ninth of the weight and does a
    ninth of the work (ResNet-18's last stage at 32x32, ORT's NCHWc convs skip them too)."""
    from akg.graph.ops.conv import pads4, pair, window_out

    rw = _Rewriter(graph)
    for node in rw.walk():
        ins = rw.inputs(node)
        weight = rw.const(ins[1]) if node.op == "conv2d" and len(ins) == 2 else None
        if weight is None:
            rw.keep(node)
            continue
        x, w, out = ins[0], ins[1], node.outputs[0]
        (sh, sw), (dh, dw) = pair(node.attrs["strides"], "strides"), pair(node.attrs["dilation"], "dilation")
        pt, pl, pb, pr = pads4(node.attrs["padding"])
        _, _, h, wd = x.shape
        _, _, kh, kw = w.shape
        _, _, oh, ow = out.shape
        r0, r1 = live_taps(h, oh, kh, sh, dh, pt)
        c0, c1 = live_taps(wd, ow, kw, sw, dw, pl)
        top, left = pt - r0 * dh, pl - c0 * dw
        # bottom and right: what the last window still reads past the input, no more
        bottom = max(0, (oh - 1) * sh + (r1 - r0) * dh + 1 - h - top)
        right = max(0, (ow - 1) * sw + (c1 - c0) * dw + 1 - wd - left)
        pads = (top, left, min(bottom, pb), min(right, pr))
        if (r0, r1, c0, c1) == (0, kh - 1, 0, kw - 1) or min(pads) < 0 or \
                window_out(h, r1 - r0 + 1, sh, pads[0], pads[2], dh) != oh or \
                window_out(wd, c1 - c0 + 1, sw, pads[1], pads[3], dw) != ow:
            rw.keep(node)
            continue
        name = rw.fresh(f"{w.name}.taps")
        sliced = np.ascontiguousarray(weight[:, :, r0:r1 + 1, c0:c1 + 1])
        live = Value(name, TensorType(sliced.shape, w.dtype))
        rw.constants[live] = sliced
        rw.emit("conv2d", [x, live], {**node.attrs, "padding": list(pads)}, [out])
        rw.changes += 1
    return rw.finish("conv_taps")


# --- scales folded into constant weights ---------------------------------------------------------


def _channel_scale(scale: np.ndarray, out_shape: tuple, axis: int) -> np.ndarray | None:
    """The per-channel vector (length `out_shape[axis]`) that `scale` multiplies a product of
    `out_shape` by, or None when it varies along another axis or would widen the product."""
    rank = len(out_shape)
    if scale.ndim > rank:
        return None
    full = scale.reshape((1,) * (rank - scale.ndim) + scale.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != axis) or full.shape[axis] not in (1, out_shape[axis]):
        return None
    return np.broadcast_to(full.reshape(-1), (out_shape[axis],))


@defpass("fold_scales")
def fold_scales(graph: Graph) -> Graph:
    """A product by a constant weight (conv2d, 2-d matmul) whose only use is a multiplication
    by a constant per output channel becomes the product by the scaled weight: conv(x, W) * s
    = conv(x, W * s[o]), x @ W * s = x @ (W * s). An inference batch norm after a conv (its
    folded scale) or a scaled linear layer then costs nothing per element, as PyTorch's ONNX
    export folds it; the same model then compiles to the same kernels through every door.
    Float weights used by nothing else only: a shared weight would be copied."""
    single = _single_use(graph)
    rw = _Rewriter(graph)
    for node in rw.walk():
        ins = rw.inputs(node)
        if node.op != "mul" or len(ins) != 2:
            rw.keep(node)
            continue
        out = node.outputs[0]
        for y, s in (ins, ins[::-1]):
            scale, product = rw.const(s), rw.producer.get(y)
            if scale is None or product is None or y.type != out.type or y not in single:
                continue
            if product.op not in ("conv2d", "matmul") or len(product.inputs) != 2:
                continue
            w = product.inputs[1]
            weight = rw.constants.get(w)
            if weight is None or w not in single or not np.issubdtype(weight.dtype, np.floating):
                continue
            if product.op == "matmul" and (weight.ndim != 2 or len(out.shape) != 2):
                continue
            axis = 1 if product.op == "conv2d" else len(out.shape) - 1
            vector = _channel_scale(scale, tuple(out.shape), axis)
            if vector is None:
                continue
            if product.op == "conv2d":
                scaled = weight * vector.reshape(-1, 1, 1, 1)
            elif product.attrs["transpose_b"]:
                scaled = weight * vector[:, None]
            else:
                scaled = weight * vector[None, :]
            name = rw.fresh(f"{w.name}.scaled")
            folded = Value(name, w.type)
            rw.constants[folded] = scaled.astype(weight.dtype)
            rw.emit(product.op, [product.inputs[0], folded], product.attrs, [out])  # the old product: dead
            rw.changes += 1
            break
        else:
            rw.keep(node)
    return rw.finish("fold_scales")


# --- common subexpressions ----------------------------------------------------------------------


def _const_key(a: np.ndarray) -> tuple:
    data = np.ascontiguousarray(a)
    return (a.dtype.str, a.shape, hashlib.sha1(data.tobytes()).hexdigest())


@defpass("cse")
def cse(graph: Graph) -> Graph:
    """Merge equal constants (same dtype, shape and bytes) and nodes with the same op,
    attributes and inputs (in either order for commutative ops); the first one stays."""
    rw = _Rewriter(graph)
    seen_consts: dict[tuple, Value] = {}
    for v, a in graph.constants.items():
        key = _const_key(a)
        if key in seen_consts:
            rw.replace(v, seen_consts[key])
            del rw.constants[v]
        else:
            seen_consts[key] = v
    outputs = set(graph.outputs)
    seen: dict[tuple, Node] = {}
    for node in rw.walk():
        ins = rw.inputs(node)
        operands = tuple(sorted(ins, key=lambda v: v.name)) if node.op in COMMUTATIVE else tuple(ins)
        key = (node.op, node.attrs, operands)
        first = seen.get(key)
        if first is None or (len(node.outputs) > 1 and outputs.intersection(node.outputs)):
            seen.setdefault(key, node)
            rw.keep(node)
            continue
        for old, new in zip(node.outputs, first.outputs):
            rw.replace(old, new)
    return rw.finish("cse")


# --- dead code ----------------------------------------------------------------------------------


@defpass("dce")
def dce(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs reach a graph output, and unused constants (graph
    inputs stay: they are the graph's signature)."""
    live = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if live.intersection(node.outputs):
            kept.append(node)
            live.update(node.inputs)
    constants = {v: a for v, a in graph.constants.items() if v in live}
    dropped = len(graph.nodes) - len(kept) + len(graph.constants) - len(constants)
    if not dropped:
        return graph
    log.debug("dce on %s: %d node(s) and constant(s) dropped", graph.name, dropped)
    return Graph(graph.name, graph.inputs, graph.outputs, reversed(kept), constants)

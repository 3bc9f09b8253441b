"""ONNX's Einsum and Det in the ONNX op table (`ONNX_OPS`): Einsum parsed into diagonals
(gathers), a batch_matmul for two operands that contract, or a broadcast product and a sum;
Det as the Leibniz sum over permutations (small matrices)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx
from akg.graph.ir import Value
from akg.graph.types import is_float


def _parse(c: Ctx, equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Each operand's labels and the output's, '...' expanded into labels of its own (the
    broadcast axes, right-aligned across operands); implicit output: the ellipsis axes, then
    the labels used once, sorted."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise c.fail(f"equation '{equation}' names {len(terms)} operands, the node has {len(ranks)}")
    ell = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            ell = max(ell, rank - len(term.replace("...", "")))
    dots = [f"#{k}" for k in range(ell)]  # labels no letter can be

    def expand(term: str, rank: int | None) -> list[str]:
        if "..." not in term:
            labels = list(term)
        else:
            head, tail = term.split("...")
            n = ell if rank is None else rank - len(head) - len(tail)
            labels = [*head, *dots[ell - n:], *tail]
        if any(not (lb.isalpha() or lb.startswith("#")) for lb in labels):
            raise c.fail(f"equation '{equation}' has a label that is not a letter")
        return labels

    ins = [expand(t, r) for t, r in zip(terms, ranks)]
    for labels, rank in zip(ins, ranks):
        if len(labels) != rank:
            raise c.fail(f"equation '{equation}': a term names {len(labels)} axes of a rank-{rank} operand")
    if arrow:
        out = expand(rhs, None)
    else:
        counts = {}
        for labels in ins:
            for lb in labels:
                counts[lb] = counts.get(lb, 0) + 1
        out = dots + sorted(lb for lb, n in counts.items() if n == 1 and not lb.startswith("#"))
    return ins, out


def _diagonal(c: Ctx, x: Value, labels: list[str], k: int) -> tuple[Value, list[str]]:
    """x with repeated labels reduced to their diagonal (a gather of x flattened)."""
    unique = list(dict.fromkeys(labels))
    if len(unique) == len(labels):
        return x, labels
    sizes = {lb: d for lb, d in zip(labels, x.shape)}
    grid = np.indices([sizes[lb] for lb in unique], dtype=np.int64)
    strides = [math.prod(x.shape[i + 1:]) for i in range(len(labels))]
    flat_index = sum(grid[unique.index(lb)] * s for lb, s in zip(labels, strides))
    flat = c.make("reshape", x, shape=[x.type.size], what=f"flat{k}")
    return c.make("gather", flat, c.const(np.asarray(flat_index, np.int64), "int64", f"diag_index{k}"), axis=0,
                  what=f"diag{k}"), unique


def _align(c: Ctx, x: Value, labels: list[str], order: list[str], sizes: dict[str, int], k: int) -> Value:
    """x transposed to `order` (its labels' places there) and given size-1 axes for the rest."""
    mine = [lb for lb in order if lb in labels]
    perm = [labels.index(lb) for lb in mine]
    if perm != list(range(len(perm))):
        x = c.make("transpose", x, perm=perm, what=f"moved{k}")
    shape = [x.shape[mine.index(lb)] if lb in mine else 1 for lb in order]
    return c.make("reshape", x, shape=shape, what=f"aligned{k}") if list(shape) != list(x.shape) else x


def _sum_out(c: Ctx, x: Value, labels: list[str], keep: set[str], k: int) -> tuple[Value, list[str]]:
    """x summed over the labels no one else needs."""
    axes = [i for i, lb in enumerate(labels) if lb not in keep]
    if not axes:
        return x, labels
    return (c.make("sum", x, axes=axes, keepdims=False, what=f"summed{k}"),
            [lb for lb in labels if lb in keep])


def _contract_pair(c: Ctx, a: Value, la: list[str], b: Value, lb_: list[str], out: list[str],
                   sizes: dict[str, int]) -> tuple[Value, list[str]]:
    """a and b multiplied and summed over the labels they share that the output does not keep,
    as one batch_matmul: [batch, rows, inner] @ [batch, inner, cols]."""
    shared = [lb for lb in la if lb in lb_]
    inner = [lb for lb in shared if lb not in out]
    batch = [lb for lb in shared if lb in out]
    rows = [lb for lb in la if lb not in shared]
    cols = [lb for lb in lb_ if lb not in shared]
    nb, nr, nk, nc = (math.prod(sizes[lb] for lb in g) for g in (batch, rows, inner, cols))
    a = _align(c, a, la, batch + rows + inner, sizes, 0)
    b = _align(c, b, lb_, batch + inner + cols, sizes, 1)
    a3 = c.make("reshape", a, shape=[nb, nr, nk], what="a3")
    b3 = c.make("reshape", b, shape=[nb, nk, nc], what="b3")
    product = c.make("batch_matmul", a3, b3, what="product")
    labels = batch + rows + cols
    return c.make("reshape", product, shape=[sizes[lb] for lb in labels], what="unflat"), labels


@ONNX_OPS.register_op("Einsum", "gather (diagonals), transpose, batch_matmul / mul, sum")
def _einsum(c: Ctx):
    values = [c.v(i) for i in range(len(c.args))]
    ins, out = _parse(c, c.str_("equation"), [len(v.shape) for v in values])
    sizes: dict[str, int] = {}
    for v, labels in zip(values, ins):
        for lb, d in zip(labels, v.shape):
            if sizes.setdefault(lb, d) != d and d != 1:
                if sizes[lb] == 1:
                    sizes[lb] = d
                else:
                    raise c.fail(f"label '{lb}' has sizes {sizes[lb]} and {d}")
    operands = []
    for k, (v, labels) in enumerate(zip(values, ins)):
        v, labels = _diagonal(c, v, labels, k)
        others = set(out).union(*(set(ls) for j, ls in enumerate(ins) if j != k))
        operands.append(_sum_out(c, v, labels, others, k))
    def full(v: Value, labels: list[str]) -> bool:  # no axis broadcast from size 1
        return all(d == sizes[lb] for d, lb in zip(v.shape, labels))

    if len(operands) == 2 and all(full(v, ls) for v, ls in operands) and is_float(values[0].dtype):
        (a, la), (b, lb_) = operands
        y, labels = _contract_pair(c, a, la, b, lb_, out, sizes)
    else:
        order = out + [lb for lb in sizes if lb not in out]
        y = None
        for k, (v, labels) in enumerate(operands):
            aligned = _align(c, v, labels, order, sizes, k)
            y = aligned if y is None else c.make("mul", y, aligned, what=f"product{k}")
        labels = order
        y, labels = _sum_out(c, y, labels, set(out), len(operands))
        y = c.make("broadcast_to", y, shape=[sizes[lb] for lb in labels], what="full") \
            if list(y.shape) != [sizes[lb] for lb in labels] else y
    perm = [labels.index(lb) for lb in out]
    if perm != list(range(len(perm))):
        return c.make("transpose", y, perm=perm)
    return c.make("reshape", y, shape=y.shape)


@ONNX_OPS.register_op("Det", "gather, prod, mul, sum (Leibniz, up to 5x5)")
def _det(c: Ctx):
    """det over the last two axes: the sum over permutations p of sign(p) * prod_i x[i, p(i)]."""
    x = c.v(0)
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise c.fail(f"needs square matrices in the last two axes, got {x.type}")
    n = x.shape[-1]
    if n > 5:
        raise c.unsupported(f"the determinant of {n}x{n} matrices is not modelled (up to 5x5: the Leibniz sum)")
    perms = list(itertools.permutations(range(n)))
    index = np.asarray([[i * n + p[i] for i in range(n)] for p in perms], np.int64)  # [perms, n]
    signs = np.asarray([(-1) ** sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n)) for p in perms])
    lead = list(x.shape[:-2])
    flat = c.make("reshape", x, shape=[*lead, n * n], what="flat")
    picked = c.make("gather", flat, c.const(index, "int64", "terms_index"), axis=len(lead), what="picked")
    terms = c.make("prod", picked, axes=[len(lead) + 1], keepdims=False, what="terms")
    signed = c.make("mul", terms, c.const(signs.astype(x.dtype), x.dtype, "signs"), what="signed")
    return c.make("sum", signed, axes=[len(lead)], keepdims=False)

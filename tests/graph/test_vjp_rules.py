"""Every VJP rule (registered next to its op family) against central finite differences in
float64 on random inputs away from kinks, with a random cotangent (JAX's check_grads), and
expanded into ops with compute definitions; the registry walk: every differentiable op has a
rule and a case here, the others are declared."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from akg.graph import GraphBuilder, evaluate, parse_mir
from akg.graph.autodiff import grad
from akg.graph.interpreter import random_array
from akg.graph.expand import expand
from akg.graph.ops import COMPUTES, OPS, VJP_RULES, get_op
from akg.graph.types import TensorType, is_float


def T(shape, dtype="float64") -> TensorType:
    return TensorType(shape, dtype)


@dataclass
class Case:
    """One call of an op: input types, attributes, how to draw each input (by position):
    'pos' > 0.5, 'away' from 0, 'distinct' values at least 0.05 apart (no ties for max), 'relu6'
    away from 0 and 6."""

    op: str
    types: list
    attrs: dict = field(default_factory=dict)
    draw: dict = field(default_factory=dict)
    eps: float = 1e-6
    tol: float = 1e-6

    @property
    def id(self) -> str:
        return f"{self.op}-{'-'.join(str(list(t.shape)) for t in self.types)}-{self.attrs}"


def _draw(kind: str | None, t: TensorType, position: int, rng, bound: int | None) -> np.ndarray:
    a = random_array(t, rng, bound)
    if not is_float(t.dtype) or kind is None:
        return a
    if kind == "pos":
        return np.abs(a) + 0.5
    if kind == "away":
        return np.sign(a) * (np.abs(a) + 0.3)
    if kind == "distinct":
        values = (rng.permutation(t.size) - t.size / 2) * 0.1 + 0.05 * position
        return values.reshape(t.shape).astype(t.dtype)
    if kind == "relu6":
        centres = rng.choice([-2.0, -0.5, 0.5, 2.5, 5.5, 6.5, 8.0], size=t.shape)
        return (centres + 0.2 * rng.uniform(-1, 1, t.shape)).astype(t.dtype)
    raise ValueError(kind)


def _unary(ops, draw=None, shape=(2, 3)):
    return [Case(op, [T(shape)], draw={0: draw} if draw else {}) for op in ops]


CASES: list[Case] = [
    *_unary(["neg", "exp", "tanh", "sigmoid", "erf", "sin", "cos"]),
    *_unary(["log", "sqrt", "rsqrt"], "pos"),
    *_unary(["abs", "relu", "reciprocal"], "away"),
    Case("relu6", [T((4, 5))], draw={0: "relu6"}),
    Case("gelu", [T((2, 3))]),
    Case("gelu", [T((2, 3))], {"approximate": "tanh"}),
    *[Case(op, types) for op in ("add", "sub", "mul")
      for types in ([T((2, 3)), T((3,))], [T((2, 1, 3)), T((4, 1))], [T(()), T((2, 2))])],
    Case("div", [T((2, 3)), T((2, 1))], draw={1: "away"}),
    Case("div", [T(()), T((3,))], draw={1: "away"}),
    Case("pow", [T((2, 3)), T((3,))], draw={0: "pos"}),
    *[Case(op, types, draw={0: "distinct", 1: "distinct"}) for op in ("maximum", "minimum")
      for types in ([T((2, 3)), T((3,))], [T((3, 1)), T((1, 4))])],
    Case("where", [T((2, 1), "bool"), T((3,)), T((2, 3))]),
    Case("cast", [T((2, 3))], {"to": "float64"}),
    Case("cast", [T((2, 3), "float32")], {"to": "float64"}, eps=1e-2, tol=1e-4),
    # layout
    Case("broadcast_to", [T((3, 1))], {"shape": [2, 3, 4]}),
    Case("reshape", [T((2, 3, 4))], {"shape": [4, -1]}),
    Case("transpose", [T((2, 3, 4))], {"perm": [2, 0, 1]}),
    Case("squeeze", [T((1, 3, 1))]),
    Case("expand_dims", [T((2, 3))], {"axis": 1}),
    Case("slice", [T((4, 5))], {"begin": [1, -3], "end": [3, 100]}),
    Case("strided_slice", [T((4, 5))], {"begin": [3, 0], "end": [-5, 5], "strides": [-1, 2]}),
    Case("strided_slice", [T((7, 6))], {"begin": [1, 5], "end": [7, 0], "strides": [3, -2]}),
    Case("concat", [T((2, 3)), T((2, 1)), T((2, 2))], {"axis": 1}),
    Case("split", [T((6, 2))], {"sizes": [1, 2, 3]}),
    Case("split", [T((2, 4))], {"axis": 1, "sections": 2}),
    Case("pad", [T((2, 3))], {"before": [1, 0], "after": [0, 2], "value": 7.0}),
    Case("dilate", [T((2, 3))], {"strides": [2, 3]}),
    # reductions
    *[Case(op, [T((2, 3, 4))], attrs, draw={0: "distinct"} if op in ("max", "min") else
           {0: "away"} if op == "prod" else {})
      for op in ("sum", "mean", "max", "min", "prod")
      for attrs in ({"axes": [0, 2], "keepdims": True}, {"axes": [1]}, {})],
    # linalg
    *[Case("matmul", [T((2, 3) if ta else (3, 2)), T((4, 2) if tb else (2, 4))],
           {"transpose_a": ta, "transpose_b": tb}) for ta in (False, True) for tb in (False, True)],
    Case("batch_matmul", [T((2, 1, 3, 4)), T((5, 4, 2))]),
    Case("batch_matmul", [T((2, 4, 3)), T((2, 4))], {"transpose_a": True, "transpose_b": True}),
    Case("batch_matmul", [T((3, 4)), T((2, 5, 4))], {"transpose_b": True}),
    Case("dense", [T((2, 5, 3)), T((4, 3)), T((4,))]),
    Case("dense", [T((3,)), T((4, 3))]),
    Case("dense", [T((6, 3)), T((4, 3)), T((4,))]),
    # conv and pooling
    Case("conv2d", [T((2, 4, 7, 6)), T((6, 2, 3, 2))],
         {"strides": [2, 1], "padding": [1, 0, 2, 1], "dilation": [1, 2], "groups": 2}),
    Case("conv2d", [T((1, 3, 5, 5)), T((4, 3, 3, 3))], {"padding": [1]}),
    Case("conv2d", [T((1, 2, 6, 7)), T((3, 2, 3, 2))], {"strides": [2, 3]}),
    Case("conv2d", [T((1, 2, 4, 4)), T((2, 2, 1, 1))], {"padding": [2, 1], "strides": [2]}),
    Case("conv2d", [T((2, 4, 5, 5)), T((4, 1, 3, 3))], {"strides": [2], "padding": [1], "groups": 4}),
    Case("conv2d", [T((1, 2, 9, 9)), T((2, 1, 3, 3))], {"dilation": [2, 3], "strides": [2], "groups": 2,
                                                         "padding": [0, 1, 3, 0]}),
    Case("max_pool2d", [T((1, 2, 5, 5))], {"kernel": [3], "strides": [2], "padding": [1], "ceil_mode": True},
         draw={0: "distinct"}),
    Case("max_pool2d", [T((2, 1, 4, 6))], {"kernel": [2]}, draw={0: "distinct"}),
    Case("max_pool2d", [T((1, 1, 5, 6))], {"kernel": [3, 2], "strides": [1, 2]}, draw={0: "distinct"}),
    Case("avg_pool2d", [T((1, 2, 5, 5))], {"kernel": [3, 2], "padding": [1, 1], "count_include_pad": False}),
    Case("avg_pool2d", [T((1, 2, 5, 5))], {"kernel": [3], "strides": [2], "padding": [1], "ceil_mode": True}),
    Case("avg_pool2d", [T((2, 1, 4, 4))], {"kernel": [2]}),
    Case("global_avg_pool2d", [T((2, 3, 4, 5))], {"keepdims": False}),
    Case("global_avg_pool2d", [T((2, 3, 2, 2))]),
    # nn composites
    Case("softmax", [T((2, 3, 4))]),
    Case("softmax", [T((3, 4))], {"axis": 0}),
    Case("log_softmax", [T((2, 5))]),
    Case("log_softmax", [T((3, 2))], {"axis": 0}),
    Case("layer_norm", [T((2, 3, 4)), T((3, 4)), T((3, 4))], {"begin_norm_axis": 1}),
    Case("layer_norm", [T((3, 5)), T((5,)), T((5,))]),
    Case("layer_norm", [T((4,)), T((4,)), T((4,))], {"begin_norm_axis": 0}),
    Case("batch_norm", [T((2, 3, 4)), T((3,)), T((3,)), T((3,)), T((3,))], draw={4: "pos"}),
    Case("batch_norm", [T((2, 3, 2, 2)), T((2,)), T((2,)), T((2,)), T((2,))], {"axis": -1, "epsilon": 0.1},
         draw={4: "pos"}),
    Case("variance", [T((2, 3, 4))], {"axes": [0, 2]}),
    Case("variance", [T((3, 4))], {"keepdims": True}),
    Case("dropout", [T((2, 3))], {"rate": 0.1}),
    *[Case(op, [T((4, 3)), T((4,), "int32")], {"reduction": r})
      for op in ("nll_loss", "cross_entropy") for r in ("mean", "sum", "none")],
    # ignore_index inside [0, C): random labels hit it, those rows pass no gradient
    *[Case(op, [T((6, 3)), T((6,), "int32")], {"reduction": r, "ignore_index": 1})
      for op in ("nll_loss", "cross_entropy") for r in ("mean", "none")],
    # indexing
    Case("gather", [T((5, 3)), T((2, 4), "int32")]),
    Case("gather", [T((3, 4)), T((5,), "int64")], {"axis": 1}),
    Case("scatter_add", [T((4, 3)), T((5,), "int32"), T((5, 3))]),
    Case("scatter_add", [T((2, 4)), T((3, 2), "int32"), T((2, 3, 2))], {"axis": 1}),
]


def _arrays(case: Case, rng) -> list[np.ndarray]:
    opdef = get_op(case.op)
    attrs = opdef.check_attrs(case.attrs)
    bounds = opdef.index_bounds(*case.types, **attrs) if opdef.index_bounds else {}
    return [_draw(case.draw.get(i), t, i, rng, bounds.get(i)) for i, t in enumerate(case.types)]


def check_vjp(case: Case, seed: int = 0) -> None:
    """Gradients from `grad` of sum(op(x) * cotangent) against central differences of the op's
    NumPy reference, along a random direction for each float input."""
    opdef = get_op(case.op)
    attrs = opdef.check_attrs(case.attrs)
    rng = np.random.default_rng(seed)
    arrays = _arrays(case, rng)
    out_types = opdef.infer_types(case.types, attrs)
    cts = [rng.standard_normal(t.shape) for t in out_types]

    b = GraphBuilder("vjp")
    xs = [b.input(f"in{i}", t.shape, t.dtype) for i, t in enumerate(case.types)]
    outs = b.op(case.op, *xs, **case.attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    terms = [b.sum(b.mul(o, b.const(ct.astype(o.dtype)))) for o, ct in zip(outs, cts)]
    loss = terms[0]
    for t in terms[1:]:
        loss = b.add(loss, t)
    b.output(loss)
    wrt = [x.name for x in xs if is_float(x.dtype)]
    backward = grad(b.build(), loss.name, wrt)
    assert parse_mir(str(backward)) == backward  # an ordinary graph: prints and parses back
    _, *grads = evaluate(backward, arrays)
    # the backward ops expand to basic ops that have compute definitions, computing the same
    flat = expand(backward)
    assert {n.op for n in flat.nodes} <= set(COMPUTES), sorted({n.op for n in flat.nodes} - set(COMPUTES))
    for got, want in zip(evaluate(flat, arrays)[1:], grads):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)

    def objective(arrs) -> float:
        with np.errstate(all="ignore"):
            ys = opdef.evaluate(arrs, attrs)
        return sum(float((np.asarray(y, np.float64) * ct).sum()) for y, ct in zip(ys, cts))

    for gi, i in zip(grads, [i for i, x in enumerate(xs) if is_float(x.dtype)]):
        assert gi.shape == arrays[i].shape and gi.dtype == arrays[i].dtype
        d = rng.standard_normal(arrays[i].shape)

        def shifted(sign):
            arrs = list(arrays)
            arrs[i] = (arrays[i] + sign * case.eps * d).astype(arrays[i].dtype)
            return arrs

        fd = (objective(shifted(1)) - objective(shifted(-1))) / (2 * case.eps)
        analytic = float((gi.astype(np.float64) * d).sum())
        assert abs(fd - analytic) <= case.tol * (1 + abs(fd)), (case.id, f"input {i}", fd, analytic)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_vjp_rule_matches_finite_differences(case):
    check_vjp(case)


# --- the registry walk ------------------------------------------------------------------------


def test_every_differentiable_op_has_a_rule_and_a_case():
    differentiable = {n for n, d in OPS.items() if d.differentiable}
    assert sorted(differentiable - set(VJP_RULES)) == [], "add a VJP rule (graph/ops/<family>.py)"
    assert sorted(differentiable - {c.op for c in CASES}) == [], "add a case to CASES"


def test_rules_belong_to_differentiable_ops_only():
    for name, rule in VJP_RULES.items():
        assert name in OPS, name
        assert get_op(name).differentiable, f"{name} has a rule but is declared non-differentiable"
        family = get_op(name).infer.__module__
        assert rule.__module__ == family, f"the rule of {name} lives in {rule.__module__}, not {family}"


NON_DIFFERENTIABLE = [
    "floor", "ceil", "round", "sign", "mod", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "logical_and", "logical_or", "logical_not", "isnan", "isinf", "argmax", "argmin",
    "one_hot", "complex", "real", "imag",
    # Winograd's convolution ops exist only after autodiff (the "winograd" pass of compilation)
    "winograd_input", "winograd_product", "winograd_output",
    # collectives of per-rank graphs: the SPMD split runs after autodiff
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "shard_slice", "mark_partial", "send", "recv",
]


def test_non_differentiable_ops_are_declared():
    declared = sorted(n for n, d in OPS.items() if not d.differentiable)
    assert declared == sorted(NON_DIFFERENTIABLE)


def test_integer_casts_pass_no_gradient():
    b = GraphBuilder()
    x = b.input("x", (3,), "float64")
    through_int = b.cast(b.cast(x, to="int32"), to="float64")
    loss = b.sum(b.add(b.mul(x, x), through_int))
    b.output(loss)
    xv = np.array([1.5, -2.0, 0.25])
    _, gx = evaluate(grad(b.build(), loss.name, ["x"]), {"x": xv})
    np.testing.assert_allclose(gx, 2 * xv)

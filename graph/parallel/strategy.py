"""Strategies: the ways one op can run on a mesh, as the sharding rules list them.

A `Strategy` gives the sharding of every input and output of one op. Each device then runs
the op on its pieces: the same op with the same attributes unless the strategy says
otherwise (`attrs`: local attributes, e.g. a reshape's local shape; `local`: a function
emitting a different local computation, e.g. a mean over a split dim as a partial sum of
local means divided by the group size). An output marked partial over some mesh axes holds
partial sums there: the all-reduce (or reduce-scatter) it needs is a resharding on the edge
to its consumers, chosen by the search and inserted by the SPMD rewrite.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from akg.graph.ops import get_op
from akg.graph.ops.registry import SHARDING_RULES, Attrs
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.sharding import Sharding
from akg.graph.types import TensorType


@dataclass(frozen=True)
class OpCall:
    """One op application as a rule sees it: no values, only types and attributes."""

    op: str
    ins: tuple[TensorType, ...]
    outs: tuple[TensorType, ...]
    attrs: Attrs

    @classmethod
    def of(cls, node) -> "OpCall":
        return cls(node.op, tuple(v.type for v in node.inputs), tuple(v.type for v in node.outputs), node.attrs)


@dataclass(frozen=True)
class Strategy:
    """`name` says it in words (`"row(tp)"`, `"batch(dp) x col(tp)"`); `inputs`/`outputs`
    one Sharding per operand; `attrs` the local attributes where they differ from the op's;
    `local(e, values, attrs, mesh)` emits the local computation (default: the op itself)
    through an emitter `e` with `e.op(name, *values, **attrs)` and returns its outputs."""

    name: str
    inputs: tuple[Sharding, ...]
    outputs: tuple[Sharding, ...]
    attrs: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    local: Callable | None = field(default=None, compare=False, hash=False)

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"{self.name}: ({ins}) -> ({outs})"

    def fits(self, call: OpCall, mesh: Mesh) -> bool:
        """Every operand splits evenly on `mesh`."""
        return all(s.divides(t.shape, mesh) for s, t in zip(self.inputs, call.ins)) and \
            all(s.divides(t.shape, mesh) for s, t in zip(self.outputs, call.outs))


def replicated_strategy(call: OpCall) -> Strategy:
    """Every device runs the whole op: always legal."""
    return Strategy("replicated", tuple(Sharding.replicated(t.rank) for t in call.ins),
                    tuple(Sharding.replicated(t.rank) for t in call.outs))


def strategies(call: OpCall, mesh: Mesh) -> list[Strategy]:
    """Every legal strategy of `call` on `mesh` that splits evenly, replicated first;
    MissingRuleError names an op without a rule."""
    rule = SHARDING_RULES.get(call.op)
    get_op(call.op)
    out = [replicated_strategy(call)]
    seen = {(out[0].inputs, out[0].outputs)}
    for s in rule(call, mesh):
        key = (s.inputs, s.outputs)
        if key in seen or not s.fits(call, mesh):
            continue
        seen.add(key)
        out.append(s)
    return out


# --- helpers for rules --------------------------------------------------------------------------


def axis_assignments(mesh: Mesh, choices: int, *, min_used: int = 1) -> Iterable[tuple[int | None, ...]]:
    """Every way to give each mesh axis one of `choices` slots or none (None): the building
    block of rules that split any of several dims (per axis: which dim it splits)."""
    for combo in itertools.product([None, *range(choices)], repeat=len(mesh.names)):
        if sum(c is not None for c in combo) >= min_used:
            yield combo


def dims_from(mesh: Mesh, combo: Sequence[int | None], rank: int) -> tuple[tuple[str, ...], ...]:
    """Per tensor dim the mesh axes that `combo` (per axis: a dim or None) puts on it, in
    mesh order."""
    dims: list[list[str]] = [[] for _ in range(rank)]
    for axis, d in zip(mesh.names, combo):
        if d is not None:
            dims[d].append(axis)
    return tuple(tuple(d) for d in dims)


def local_attrs(call: OpCall, strategy: Strategy) -> dict[str, Any]:
    """The attributes each device runs the op with."""
    return {**call.attrs, **(strategy.attrs or {})}


def emit_local(b, call: OpCall, strategy: Strategy, values: Sequence, mesh: Mesh) -> tuple:
    """Emit through `b` (a GraphBuilder: `b.op`, `b.const`) what one device computes for
    `call` under `strategy` on its pieces `values`; returns the op's outputs, one per output."""
    attrs = local_attrs(call, strategy)
    if strategy.local is not None:
        out = strategy.local(b, tuple(values), attrs, mesh)
    else:
        out = b.op(call.op, *values, **attrs)
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)

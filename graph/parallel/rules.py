"""Building blocks of the sharding rules (registered next to each op family in
`graph/ops/<family>.py`): an op's ways to split as *roles*, each mesh axis given one role or
none, and the local computations some strategies need (a rank's offset along a split dim).

A `Role` says what a mesh axis assigned to it does: which dims of which inputs and outputs
it splits, which inputs it expects as partial sums and which outputs it leaves as partial
sums. `matmul` has the roles m, n and k; an elementwise op one role per output dim plus its
linear ones (`add`: both inputs partial -> output partial). `assign_roles` lists one
Strategy per assignment of the mesh axes to roles; rules reject or complete each (local
attributes, a `local` computation) through `finish`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.strategy import OpCall, Strategy, axis_assignments


@dataclass(frozen=True)
class Role:
    """`ins`/`outs`: (operand position, dim) pairs split by the axes of this role;
    `partial_ins`/`partial_outs`: operand positions that are partial sums over them."""

    name: str
    ins: tuple[tuple[int, int], ...] = ()
    outs: tuple[tuple[int, int], ...] = ()
    partial_ins: tuple[int, ...] = ()
    partial_outs: tuple[int, ...] = ()


def partial_role(name: str, ins: Sequence[int], outs: Sequence[int] = (0,)) -> Role:
    """A linear role: inputs `ins` partial sums -> outputs `outs` partial sums."""
    return Role(name, partial_ins=tuple(ins), partial_outs=tuple(outs))


Finish = Callable[[Strategy, dict[str, tuple[str, ...]]], "Strategy | None"]


def assign_roles(call: OpCall, mesh: Mesh, roles: Sequence[Role], finish: Finish | None = None
                 ) -> list[Strategy]:
    """One Strategy per way to give every mesh axis one of `roles` or none (at least one
    axis used). An operand dim split by several axes takes them in mesh order. `finish(s,
    axes_of_role)` may return the strategy completed (local attrs, a local computation) or
    None to drop it."""
    found = []
    for combo in axis_assignments(mesh, len(roles)):
        ins = [[[] for _ in t.shape] for t in call.ins]
        outs = [[[] for _ in t.shape] for t in call.outs]
        pin: list[list[str]] = [[] for _ in call.ins]
        pout: list[list[str]] = [[] for _ in call.outs]
        by_role: dict[str, tuple[str, ...]] = {}
        words = []
        for axis, c in zip(mesh.names, combo):
            if c is None:
                continue
            r = roles[c]
            by_role[r.name] = by_role.get(r.name, ()) + (axis,)
            words.append(f"{r.name}({axis})")
            for i, d in r.ins:
                ins[i][d].append(axis)
            for i, d in r.outs:
                outs[i][d].append(axis)
            for i in r.partial_ins:
                pin[i].append(axis)
            for i in r.partial_outs:
                pout[i].append(axis)
        s = Strategy(" ".join(words),
                     tuple(Sharding(tuple(map(tuple, d)), tuple(p)) for d, p in zip(ins, pin)),
                     tuple(Sharding(tuple(map(tuple, d)), tuple(p)) for d, p in zip(outs, pout)))
        if finish is not None:
            s = finish(s, by_role)
        if s is not None:
            found.append(s)
    return found


def with_local(s: Strategy, local: Callable | None = None, **attrs) -> Strategy:
    """`s` with a local computation and/or local attributes added."""
    merged = {**(s.attrs or {}), **attrs} if attrs or s.attrs else None
    return replace(s, attrs=merged, local=local if local is not None else s.local)


def group_size(mesh: Mesh, by_role: Mapping[str, tuple[str, ...]], *names: str) -> int:
    """The number of pieces the axes of roles `names` cut a dim into."""
    return mesh.group_size([a for n in names for a in by_role.get(n, ())])


# --- local computations ------------------------------------------------------------------------


def const_like(b, value, dtype: str):
    """A constant of `dtype` through the emitter `b`."""
    return b.const(np.asarray(value, dtype=dtype))


def scaled(b, value, factor: float):
    """value * factor (a constant of value's dtype)."""
    return b.op("mul", value, const_like(b, factor, value.dtype))


def rank_offset(b, size: int, axes: Sequence[str], mesh: Mesh, dtype: str):
    """The first index this rank holds of a dim of `size` split over `axes` (a scalar of
    `dtype`): this rank's slice of arange(size), its first element. One per-rank graph
    serves every rank, so the offset is computed, never a rank's constant."""
    every = b.const(np.arange(size, dtype=dtype))
    mine = b.op("shard_slice", every, mesh=str(mesh), axes=",".join(axes), dim=0)
    first = b.op("slice", mine, begin=[0], end=[1])
    return b.op("reshape", first, shape=[])


def local_index(b, indices, size: int, axes: Sequence[str], mesh: Mesh):
    """(indices shifted into this rank's block of a dim of `size` split over `axes`, clamped
    to 0 where they fall outside it; the bool mask of those inside)."""
    k = mesh.group_size(axes)
    shifted = b.op("sub", indices, rank_offset(b, size, axes, mesh, indices.dtype))
    zero = const_like(b, 0, indices.dtype)
    inside = b.op("logical_and", b.op("greater_equal", shifted, zero),
                  b.op("less", shifted, const_like(b, size // k, indices.dtype)))
    return b.op("where", inside, shifted, zero), inside

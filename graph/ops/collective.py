"""Collective ops of per-rank SPMD graphs (written by `akg.graph.parallel`): data exchanged
between the ranks of a mesh, or (shard_slice, mark_partial) a rank's own piece chosen by its
position. Every one names the mesh (`mesh="dp=2,tp=4"`) and the mesh axes it runs over
(`axes="tp"` or `"dp,tp"`), so a per-rank graph says by itself who talks to whom.

`send`/`recv` move one value between pipeline stages (graph/parallel/stages.py).

They are not kernels: the reference interpreter runs them over simulated ranks
(`akg.graph.parallel.simulate`), the multi-process runner through torch.distributed. On a
group of one device each is the identity (or its shape change), so a graph on a 1-device
mesh still evaluates alone. `exchange` gives every op's semantics on a group's arrays.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from akg.errors import ShapeError, ShardingError
from akg.graph.ops.registry import COLLECTIVE, Attr, defop
from akg.graph.parallel.mesh import Mesh
from akg.graph.types import TensorType


def group_axes(attrs_axes: str) -> tuple[str, ...]:
    return tuple(a.strip() for a in attrs_axes.split(",") if a.strip())


def group_size(mesh: str, axes: str) -> int:
    try:
        m = Mesh.parse(mesh)
        return m.group_size(group_axes(axes))
    except ShardingError as e:
        raise ShapeError(str(e)) from None


def _dim(t: TensorType, dim: int) -> int:
    if not -t.rank <= dim < t.rank:
        raise ShapeError(f"dim {dim} is out of range for {t}")
    return dim % t.rank


_GROUP = [Attr("mesh", "str"), Attr("axes", "str")]


def _same(x: TensorType, mesh, axes, **_) -> TensorType:
    group_size(mesh, axes)
    return x


def _gathered(x: TensorType, mesh, axes, dim) -> TensorType:
    d, k = _dim(x, dim), group_size(mesh, axes)
    return x.with_shape(tuple(n * k if i == d else n for i, n in enumerate(x.shape)))


def _scattered(x: TensorType, mesh, axes, dim) -> TensorType:
    d, k = _dim(x, dim), group_size(mesh, axes)
    if x.shape[d] % k:
        raise ShapeError(f"dim {d} of {x} does not split over {k} devices")
    return x.with_shape(tuple(n // k if i == d else n for i, n in enumerate(x.shape)))


def _all_to_all(x: TensorType, mesh, axes, split_dim, concat_dim) -> TensorType:
    s, c, k = _dim(x, split_dim), _dim(x, concat_dim), group_size(mesh, axes)
    if x.shape[s] % k:
        raise ShapeError(f"dim {s} of {x} does not split over {k} devices")
    shape = list(x.shape)
    shape[s] //= k
    shape[c] *= k
    return x.with_shape(tuple(shape))


def _alone(op: str, x: np.ndarray, mesh: str, axes: str) -> np.ndarray:
    if group_size(mesh, axes) != 1:
        raise ShardingError(f"'{op}' over {axes} of mesh {mesh} exchanges data between ranks: run the "
                            f"per-rank graph with akg.graph.parallel.simulate (or on processes)")
    return x


@defop("all_reduce", kind=COLLECTIVE, infer=_same, attrs=[*_GROUP], differentiable=False,
       flops=lambda ins, outs, attrs: 0)
def all_reduce(x, mesh, axes):
    """Sum over the group: every rank gets the total."""
    return _alone("all_reduce", x, mesh, axes)


@defop("all_gather", kind=COLLECTIVE, infer=_gathered, attrs=[*_GROUP, Attr("dim", "int")],
       differentiable=False, flops=lambda ins, outs, attrs: 0)
def all_gather(x, mesh, axes, dim):
    """The group's pieces concatenated along `dim` in group order, on every rank."""
    return _alone("all_gather", x, mesh, axes)


@defop("reduce_scatter", kind=COLLECTIVE, infer=_scattered, attrs=[*_GROUP, Attr("dim", "int")],
       differentiable=False, flops=lambda ins, outs, attrs: 0)
def reduce_scatter(x, mesh, axes, dim):
    """Sum over the group, each rank keeping its slice of `dim`."""
    return _alone("reduce_scatter", x, mesh, axes)


@defop("all_to_all", kind=COLLECTIVE, infer=_all_to_all,
       attrs=[*_GROUP, Attr("split_dim", "int"), Attr("concat_dim", "int")],
       differentiable=False, flops=lambda ins, outs, attrs: 0)
def all_to_all(x, mesh, axes, split_dim, concat_dim):
    """Piece j of `split_dim` goes to the group's rank j; received pieces are concatenated
    along `concat_dim` in group order (moves a split from concat_dim to split_dim)."""
    return _alone("all_to_all", x, mesh, axes)


@defop("shard_slice", kind=COLLECTIVE, infer=_scattered, attrs=[*_GROUP, Attr("dim", "int")],
       differentiable=False, flops=lambda ins, outs, attrs: 0)
def shard_slice(x, mesh, axes, dim):
    """This rank's slice of `dim` by its position in the group (no data moves)."""
    return _alone("shard_slice", x, mesh, axes)


@defop("mark_partial", kind=COLLECTIVE, infer=_same, attrs=[*_GROUP], differentiable=False,
       flops=lambda ins, outs, attrs: 0)
def mark_partial(x, mesh, axes):
    """A replicated value as a partial sum over the group: kept by its first rank, zeros on
    the others (no data moves)."""
    return _alone("mark_partial", x, mesh, axes)


# --- point to point: pipeline stages ---------------------------------------------------------
# A value crossing from one pipeline stage to another: `send` on the ranks of the producing
# stage, `recv` on those of the consuming one, `shift` positions away along `axes` (the pipeline
# axis), matched by `tag` (the value's name). A send's result is its input, a token that keeps
# it in the graph (per-stage graphs return their sends' tokens).

_P2P = [*_GROUP, Attr("shift", "int"), Attr("tag", "str")]


def _recv_type(mesh, axes, shift, tag, shape, dtype) -> TensorType:
    group_size(mesh, axes)
    return TensorType(tuple(shape), dtype)


@defop("send", kind=COLLECTIVE, infer=_same, attrs=_P2P, differentiable=False, flops=lambda ins, outs, attrs: 0)
def send(x, mesh, axes, shift, tag):
    """Send `x` to the rank `shift` positions further along `axes`; returns `x`."""
    if shift % group_size(mesh, axes) == 0:
        return x
    raise ShardingError(f"'send' of %{tag} to another stage: run the stage graphs with "
                        f"akg.graph.parallel.stages.simulate_stages (or on processes)")


@defop("recv", kind=COLLECTIVE, infer=_recv_type, arity=0,
       attrs=[*_P2P, Attr("shape", "ints"), Attr("dtype", "dtype")], differentiable=False,
       flops=lambda ins, outs, attrs: 0)
def recv(mesh, axes, shift, tag, shape, dtype):
    """The value tagged `tag` sent by the rank `shift` positions away along `axes`."""
    raise ShardingError(f"'recv' of %{tag} from another stage: run the stage graphs with "
                        f"akg.graph.parallel.stages.simulate_stages (or on processes)")


def exchange(op: str, attrs, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """What each rank of one group gets: `arrays[i]` is the input of the group's i-th rank
    (ranks ordered as `Mesh.group` orders them)."""
    k = len(arrays)
    if op == "all_reduce":
        total = np.sum(np.stack(arrays), axis=0, dtype=arrays[0].dtype)
        return [total.copy() for _ in arrays]
    if op == "all_gather":
        whole = np.concatenate(arrays, axis=attrs["dim"])
        return [whole.copy() for _ in arrays]
    if op == "reduce_scatter":
        total = np.sum(np.stack(arrays), axis=0, dtype=arrays[0].dtype)
        return [np.ascontiguousarray(p) for p in np.split(total, k, axis=attrs["dim"])]
    if op == "all_to_all":
        s, c = attrs["split_dim"], attrs["concat_dim"]
        parts = [np.split(a, k, axis=s) for a in arrays]
        return [np.concatenate([parts[src][dst] for src in range(k)], axis=c) for dst in range(k)]
    if op == "shard_slice":
        return [np.ascontiguousarray(np.split(a, k, axis=attrs["dim"])[i]) for i, a in enumerate(arrays)]
    if op == "mark_partial":
        return [a.copy() if i == 0 else np.zeros_like(a) for i, a in enumerate(arrays)]
    raise ShardingError(f"'{op}' is not a collective op")

"""Resharding: the collectives that turn a value laid out one way into another layout.

`reshard(src, dst, shape, mesh)` returns the steps in order; each is one collective (or a
local slice/zeroing) over one mesh axis with the sharding before and after it. The cost
model prices the steps, the SPMD rewrite emits them as ops. Every step works on the
innermost axis of a dim (which keeps each step a plain concat/split of local pieces):

1. partial sums not wanted in `dst`: reduce-scatter into a split `dst` wants next on some
   dim, else all-reduce;
2. splits not wanted: all-to-all onto the dim where `dst` wants that axis next, else
   all-gather (innermost axis of a dim first);
3. splits wanted and not yet there: a local slice (no communication);
4. partial sums wanted and not there (rare): the first rank of each group keeps the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from akg.errors import ShardingError
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.sharding import Sharding

COMMUNICATING = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


@dataclass(frozen=True)
class Step:
    """One collective on the way: `op` (a collective op's name), the mesh `axis`, the dims it
    works on (`dim` for gather/scatter/slice; `split_dim`/`concat_dim` for all-to-all), and
    the sharding before and after."""

    op: str
    axis: str
    before: Sharding
    after: Sharding
    dim: int | None = None
    split_dim: int | None = None
    concat_dim: int | None = None

    @property
    def communicates(self) -> bool:
        return self.op in COMMUNICATING

    def attrs(self, mesh: Mesh) -> dict:
        """The attributes of the collective op this step emits."""
        out: dict = {"mesh": str(mesh), "axes": self.axis}
        if self.op in ("all_gather", "reduce_scatter", "shard_slice"):
            out["dim"] = self.dim
        if self.op == "all_to_all":
            out["split_dim"], out["concat_dim"] = self.split_dim, self.concat_dim
        return out

    def __str__(self) -> str:
        where = (f" dim {self.dim}" if self.dim is not None else
                 f" {self.concat_dim}->{self.split_dim}" if self.op == "all_to_all" else "")
        return f"{self.op}({self.axis}{where})"


def _next_on(dst: Sharding, cur: Sharding, axis: str) -> int | None:
    """The dim where `dst` wants `axis` as the next split after what `cur` has there."""
    d = dst.dim_of(axis)
    if d is None:
        return None
    want, have = dst.dims[d], cur.dims[d]
    if want[:len(have)] == have and len(want) > len(have) and want[len(have)] == axis:
        return d
    return None


def reshard(src: Sharding, dst: Sharding, shape: Sequence[int], mesh: Mesh) -> list[Step]:
    """The steps from `src` to `dst` for a value of `shape` on `mesh` (empty when equal).
    ShardingError when either does not fit the shape."""
    src.check(shape, mesh, "resharding source")
    dst.check(shape, mesh, "resharding target")
    if src.rank != dst.rank:
        raise ShardingError(f"cannot reshard {src} to {dst}: different ranks")
    cur, steps = src, []

    def go(op: str, axis: str, after: Sharding, **dims) -> None:
        nonlocal cur
        steps.append(Step(op, axis, cur, after, **dims))
        cur = after

    for a in src.partial:
        if a in dst.partial:
            continue
        rest = tuple(p for p in cur.partial if p != a)
        d = _next_on(dst, cur, a)
        if d is not None and cur.dim_of(a) is None:
            dims = list(cur.dims)
            dims[d] = dims[d] + (a,)
            go("reduce_scatter", a, Sharding(tuple(dims), rest), dim=d)
        else:
            go("all_reduce", a, cur.with_partial(rest))
    for d in range(cur.rank):
        while cur.dims[d] != dst.dims[d][:len(cur.dims[d])]:
            a = cur.dims[d][-1]
            gathered = cur.with_dim(d, cur.dims[d][:-1])
            d2 = _next_on(dst, gathered, a)
            if d2 is not None and d2 != d:
                go("all_to_all", a, gathered.with_dim(d2, gathered.dims[d2] + (a,)), split_dim=d2, concat_dim=d)
            else:
                go("all_gather", a, gathered, dim=d)
    for d in range(cur.rank):
        for a in dst.dims[d][len(cur.dims[d]):]:
            if a in cur.axes:  # held elsewhere still (a partial of dst's): cannot happen after 1-2
                raise ShardingError(f"internal: resharding {src} -> {dst} left axis {a} in {cur}")
            go("shard_slice", a, cur.with_dim(d, cur.dims[d] + (a,)), dim=d)
    for a in dst.partial:
        if a not in cur.partial:
            go("mark_partial", a, cur.with_partial(cur.partial + (a,)))
    if cur != dst:
        raise ShardingError(f"internal: resharding {src} -> {dst} ended at {cur}")
    return steps

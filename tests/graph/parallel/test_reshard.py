"""Resharding: every pair of layouts on a 2x2 mesh, run as collectives on simulated ranks,
gives back the same value; the steps are the expected collectives for the classic cases."""

import itertools

import numpy as np
import pytest

from akg.errors import ShardingError
from akg.graph.builder import GraphBuilder
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.reshard import reshard
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.simulate import simulate

MESH = Mesh.parse("dp=2,tp=2")


def _layouts(rank: int):
    """Every sharding of a rank-`rank` value on MESH (each axis on one dim, partial, or unused)."""
    out = []
    for combo in itertools.product([None, "p", *range(rank)], repeat=2):
        dims = [[] for _ in range(rank)]
        partial = []
        for axis, c in zip(MESH.names, combo):
            if c == "p":
                partial.append(axis)
            elif c is not None:
                dims[c].append(axis)
        out.append(Sharding(tuple(map(tuple, dims)), tuple(partial)))
        if combo[0] is not None and combo[0] == combo[1] and combo[0] != "p":  # both axes, other order
            dims[combo[0]].reverse()
            out.append(Sharding(tuple(map(tuple, dims)), tuple(partial)))
    return out


def _run(src: Sharding, dst: Sharding, whole: np.ndarray) -> np.ndarray:
    steps = reshard(src, dst, whole.shape, MESH)
    b = GraphBuilder("reshard")
    x = b.input("x", src.local_shape(whole.shape, MESH), "float32")
    v = x
    for s in steps:
        v = b.op(s.op, v, **s.attrs(MESH))
    b.output(b.op("neg", b.op("neg", v)) if v is x else v)
    g = b.build()
    outs = simulate(g, MESH, [{"x": src.shard(whole, MESH, r)} for r in range(MESH.size)])
    return dst.unshard([o[0] for o in outs], MESH)


@pytest.mark.parametrize("src", _layouts(2), ids=str)
def test_every_layout_pair_round_trips(src):
    whole = np.arange(16, dtype=np.float32).reshape(4, 4)
    for dst in _layouts(2):
        np.testing.assert_array_equal(_run(src, dst, whole), whole, err_msg=f"{src} -> {dst}")


def test_classic_steps():
    r, row, col = Sharding.replicated(2), Sharding.split(2, 0, "tp"), Sharding.split(2, 1, "tp")
    p = r.with_partial(("tp",))
    assert [str(s) for s in reshard(p, r, (4, 4), MESH)] == ["all_reduce(tp)"]
    assert [str(s) for s in reshard(p, row, (4, 4), MESH)] == ["reduce_scatter(tp dim 0)"]
    assert [str(s) for s in reshard(row, r, (4, 4), MESH)] == ["all_gather(tp dim 0)"]
    assert [str(s) for s in reshard(row, col, (4, 4), MESH)] == ["all_to_all(tp 0->1)"]
    assert [str(s) for s in reshard(r, col, (4, 4), MESH)] == ["shard_slice(tp dim 1)"]
    assert reshard(col, col, (4, 4), MESH) == []


def test_uneven_split_is_refused():
    with pytest.raises(ShardingError, match="does not split evenly"):
        reshard(Sharding.replicated(1), Sharding.split(1, 0, "dp", "tp"), (6,), MESH)

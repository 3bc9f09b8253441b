"""Per-rank graphs cut at their collectives (graph/parallel/segments.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from akg.graph.parallel.manual import data_parallel_plan
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.segments import segments
from akg.graph.parallel.spmd import spmd, spmd_stages

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_spmd import mlp_step  # noqa: E402
from test_stages import staged  # noqa: E402


def test_segments_are_waves():
    """A data-parallel step: forward and backward compiled as one piece, the all-reduces, the
    updates as another."""
    model, step = mlp_step()
    segs = segments(spmd(step, data_parallel_plan(step, Mesh.parse("dp=2"))))
    kinds = ["c" if s.is_collective else "k" for s in segs]
    assert kinds == ["k"] + ["c"] * 7 + ["k"]
    assert {s.node.op for s in segs if s.is_collective} == {"all_reduce"}
    first, last = segs[0].graph, segs[-1].graph
    assert "matmul" in {n.op for n in first.nodes} and {n.op for n in last.nodes} == {"sub"}
    assert set(last.inputs) >= {v for v in last.inputs if v.name.endswith("all_reduce_dp")}


def test_sends_and_receives_keep_their_order():
    """The first stage's receive of the cotangent comes after its send of the activation,
    though nothing it computes needs the receive first."""
    model, step = mlp_step()
    first, second = (segments(g) for g in spmd_stages(step, staged(step, "pp=2", ["relu1"])))
    p2p = lambda segs: [s.node.op for s in segs if s.is_collective]  # noqa: E731
    assert p2p(first) == ["send", "recv"] and p2p(second) == ["recv", "send"]
    assert str(first[1]) == "send(%relu1) -> %relu1.send1 over pp" and str(first[2]) == "recv() -> %grad.relu1 over pp"

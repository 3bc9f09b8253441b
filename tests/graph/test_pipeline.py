"""The graph pass pipeline: pass names and order, the identity slots, plan_model equal to
partition, options (the target, fusion limits) reaching the passes that use them."""

from __future__ import annotations


import numpy as np
import pytest

from akg.errors import MissingRuleError
from akg.graph import GraphBuilder
from akg.graph.expand import expand
from akg.graph.fuse import FusionLimits, Partition, emit_partition, partition
from akg.graph.io import load_mir
from akg.graph.layout import pack_weights
from akg.graph.pipeline import GRAPH_PASSES, PASSES, GraphPass, PlanOptions, plan_model
from akg.graph.simplify import simplify


class PanelTarget:
    """A stand-in target: panels of `width` columns, and a record of what layout asked."""

    def __init__(self, width: int):
        self.width, self.asked = width, []

    def weight_panel(self, dtype: str, columns: int) -> int:
        self.asked.append((dtype, columns))
        return self.width


def _small():
    b = GraphBuilder("small")
    x = b.input("x", [4, 8])
    w = b.const(np.arange(8 * 64, dtype=np.float32).reshape(8, 64) / 100, name="w")
    b.output(b.softmax(b.matmul(x, w), axis=-1))  # softmax: a composite op, so expand has work
    return b.build()


def test_passes_are_named_and_ordered():
    assert [p.name for p in PASSES] == ["autodiff", "parallel", "complex", "storage", "expand", "simplify", "winograd", "layout",
                                        "fuse"]
    assert all(isinstance(p, GraphPass) and p.doc for p in PASSES)
    assert list(GRAPH_PASSES) == sorted(p.name for p in PASSES)
    for name, p in GRAPH_PASSES.items():
        assert p.name == name and p in PASSES
    with pytest.raises(MissingRuleError, match=r"no graph pass for 'cse' \(known: autodiff, complex, expand, "):
        GRAPH_PASSES.get("cse")


@pytest.mark.parametrize("slot", ["autodiff", "parallel"])
def test_slots_are_identities_today(slot):
    g = _small()
    assert GRAPH_PASSES.get(slot).run(g, PlanOptions(PanelTarget(8))) is g


def test_each_pass_is_its_stage():
    g, target = _small(), PanelTarget(8)
    options = PlanOptions(target)
    run = {p.name: p.run for p in PASSES}
    expanded = run["expand"](g, options)
    assert expanded == expand(g) and "softmax" not in [n.op for n in expanded.nodes]
    simplified = run["simplify"](expanded, options)
    assert simplified == simplify(expanded)
    laid_out = run["layout"](simplified, options)
    assert laid_out == pack_weights(simplified, target=target) != pack_weights(simplified)
    assert target.asked and target.asked[0] == ("float32", 64)
    fused = run["fuse"](laid_out, options)
    assert isinstance(fused, Partition) and fused.graph is laid_out


def test_plan_ends_with_fusion():
    with pytest.raises(ValueError, match=r"ends with the 'fuse' pass, got \['expand', 'simplify'\]"):
        plan_model(_small(), passes=["expand", "simplify"])


def test_passes_by_name_skip_the_others():
    g = _small()
    p = plan_model(g, passes=["expand", "fuse"])
    assert p.graph == expand(g)
    assert emit_partition(p) == emit_partition(partition(g, simplify=False, pack_weights=False))


def test_limits_reach_fusion():
    g = _small()
    assert len(plan_model(g, limits=FusionLimits(max_ops=1))) > len(plan_model(g))
    assert emit_partition(plan_model(g, limits=FusionLimits(max_ops=1))) == \
        emit_partition(partition(g, limits=FusionLimits(max_ops=1)))


@pytest.mark.parametrize("name", ["mlp", "resnet_block"])
def test_plan_model_equals_partition_on_an_example(name, examples_dir):
    g = load_mir(examples_dir / f"{name}.mir")
    for target in (None, PanelTarget(8)):
        planned, parted = plan_model(g, target), partition(g, target=target)
        assert planned.graph == parted.graph
        assert emit_partition(planned) == emit_partition(parted)
        assert [k.subgraph.workload_key for k in planned.kernels] == \
            [k.subgraph.workload_key for k in parted.kernels]
        assert planned.cuts == parted.cuts


def test_the_target_decides_the_panels(examples_dir):
    g = load_mir(examples_dir / "mlp.mir")
    target = PanelTarget(8)
    panels = {v.name: v.shape for v in plan_model(g, target).graph.constants if v.name.endswith(".panels")}
    assert panels["fc1.weight.panels"] == (256 // 8, 784, 8)
    assert ("float32", 256) in target.asked
    default = {v.name: v.shape for v in plan_model(g).graph.constants if v.name.endswith(".panels")}
    assert default["fc1.weight.panels"] == (256 // 16, 784, 16)

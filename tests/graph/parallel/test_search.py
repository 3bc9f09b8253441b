"""The auto-parallel search: known answers (as Alpa's tests: pure data parallel costs the
all-reduces of the parameters; a 2-layer MLP on a 1x4 mesh gets Megatron's column-then-row
split with one all-reduce), the program's objective equal to the priced plan, memory
budgets, pinned shardings, training outputs in their inputs' layout, repeated layers tied,
pipeline stages, and the search never worse than the Megatron grid."""

import time
from collections import Counter

import pytest

from akg.errors import NoPlanError, ShardingError
from akg.graph.builder import GraphBuilder
from akg.graph.parallel import gpt
from akg.graph.parallel.cost import ClusterSpec, collective_time, evaluate
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.search import factorisations, grid_plans, search, search_meshes, segment
from akg.graph.parallel.cost import StepRoles
from akg.graph.parallel.sharding import Sharding

C = ClusterSpec("test", 1e12, 1e11, 1 << 34, 8, 1e-6, 1e-10, 1e-5, 1e-9)
FREE = ClusterSpec("free-compute", 1e30, 1e30, 1 << 34, 8, 1e-6, 1e-10, 1e-5, 1e-9)  # only links cost
TINY = gpt.GptSpec("tiny", 64, 2, 4, seq=16, vocab=128, dtype="float32")


def _mlp(batch, d, h, train=True):
    b = GraphBuilder("mlp")
    x = b.input("x", (batch, d))
    w1, w2 = b.input("w1", (d, h)), b.input("w2", (h, d))
    y = b.op("matmul", b.op("relu", b.op("matmul", x, w1, name="h"), name="a"), w2, name="y")
    if not train:
        b.output(y)
        return b.build()
    b.output(b.op("mean", b.op("mul", y, y, name="sq"), name="loss"))
    return gpt.step_of_inputs(b.build(), "loss", ["w1", "w2"], "sgd")


def _collectives(graph, plan, cluster):
    p = evaluate(graph, plan, cluster)
    return Counter((c.step.op, c.step.axis, c.value) for cs in p.collectives.values() for c in cs)


def test_megatron_split_of_a_2_layer_mlp_on_1x4():
    g = _mlp(16, 1024, 4096, train=False)
    plan = search(g, Mesh.parse("dp=1,tp=4"), C)
    assert str(plan.inputs["w1"]) == "[R, S(tp)]"  # column-parallel
    assert str(plan.inputs["w2"]) == "[S(tp), R]"  # row-parallel
    assert plan.choice["y"].outputs[0] == Sharding(((), ()), ("tp",))
    assert _collectives(g, plan, C) == Counter({("all_reduce", "tp", "y"): 1})


def test_megatron_training_step_keeps_weights_and_gradients_local():
    g = _mlp(16, 1024, 4096)
    plan = search(g, Mesh.parse("tp=4"), C)
    assert str(plan.inputs["w1"]) == "[R, S(tp)]" and str(plan.inputs["w2"]) == "[S(tp), R]"
    moved = {v for _, _, v in _collectives(g, plan, C)}
    assert not moved & {"w1", "w2", "grad.w1", "grad.w2", "new.w1", "new.w2"}
    assert plan.outputs["new.w1"] == plan.inputs["w1"]


def test_pure_data_parallel_costs_the_all_reduce_of_the_parameters():
    g = _mlp(4096, 128, 256)
    mesh = Mesh.parse("dp=4")
    pins = {"x": Sharding((("dp",), ())), "w1": Sharding.replicated(2), "w2": Sharding.replicated(2)}
    plan = search(g, mesh, FREE, pinned=pins)
    params = [4 * 128 * 256, 4 * 256 * 128]
    want = sum(collective_time("all_reduce", n, 4, FREE, True) for n in params)
    want += collective_time("all_reduce", 4, 4, FREE, True)  # the loss, a partial sum over dp
    assert plan.predicted["objective"] == pytest.approx(want, rel=1e-9)
    kinds = _collectives(g, plan, FREE)
    assert sum(n for (op, _, _), n in kinds.items() if op == "all_reduce") == 3


def test_objective_is_the_priced_plan():
    g = gpt.build(TINY, 4)
    for mesh in ("dp=2,tp=2", "dp=4"):
        plan = search(g, Mesh.parse(mesh), C)
        assert plan.predicted["objective"] == pytest.approx(evaluate(g, plan, C).step_time, rel=1e-9)
        assert plan.predicted["ilp"]["method"] == "exact"


def test_memory_budget_is_respected():
    g = _mlp(64, 512, 2048)
    mesh = Mesh.parse("tp=4")
    free = search(g, mesh, FREE)  # compute costs nothing: replicating everything is best
    assert free.predicted["communication"] == 0.0
    budget = free.predicted["memory"] * 0.5
    tight = search(g, mesh, FREE, memory_budget=budget)
    assert tight.predicted["memory"] <= budget
    assert tight.predicted["step_time"] > free.predicted["step_time"]
    with pytest.raises(NoPlanError, match="budget"):
        search(g, mesh, FREE, memory_budget=free.predicted["memory"] * 0.05)


def test_pinned_shardings_are_honoured_and_propagate():
    g = _mlp(16, 1024, 4096)
    mesh = Mesh.parse("tp=4")
    row = Sharding((("tp",), ()))
    plan = search(g, mesh, C, pinned={"w1": row})
    assert plan.inputs["w1"] == row and plan.outputs["new.w1"] == row
    assert plan.choice["h"].inputs[1] == row  # h contracts over the split: k(tp)
    assert plan.choice["h"].outputs[0].partial == ("tp",)
    out = Sharding((("tp",), ()))
    plan = search(g, mesh, C, pinned={"h": out})
    assert plan.choice["h"].outputs[0] == out
    with pytest.raises(ShardingError, match="no axis 'dp'"):
        search(g, mesh, C, pinned={"w1": Sharding((("dp",), ()))})
    with pytest.raises(ShardingError, match="not in graph"):
        search(g, mesh, C, pinned={"nope": row})


def test_training_outputs_come_out_in_their_inputs_layout():
    g = gpt.build(TINY, 4)
    plan = search(g, Mesh.parse("dp=2,tp=2"), C)
    news = [v.name for v in g.outputs if v.name.startswith("new.")]
    assert news and all(plan.outputs[n] == plan.inputs[n[len("new."):]] for n in news)


def test_repeated_layers_are_tied():
    graphs = [gpt.build(TINY.with_layers(n), 2) for n in (4, 12)]
    segs = [segment(g, StepRoles.of(g)) for g in graphs]
    assert segs[1].count - segs[0].count == 16  # two segments a layer (attention, mlp)
    assert len(set(segs[0].klass)) == len(set(segs[1].klass))  # the same classes
    stats = [search(g, Mesh.parse("dp=2,tp=2"), C).predicted["ilp"] for g in graphs]
    assert stats[0]["choices"] == stats[1]["choices"]  # the program does not grow with the layers
    assert abs(stats[0]["rows"] - stats[1]["rows"]) <= 0.05 * stats[0]["rows"]


def test_pipeline_stages():
    g = gpt.build(TINY.with_layers(4), 2)
    plan = search(g, Mesh.parse("pp=2,dp=2"), C, microbatches=4)
    assert plan.pp_axis == "pp" and plan.microbatches == 4 and len(plan.stages) == 2
    keys = [k for s in plan.stages for k in s]
    assert sorted(keys) == sorted(n.outputs[0].name for n in g.nodes)
    assert all(s for s in plan.stages)
    assert len(plan.predicted["stage_times"]) == 2
    assert "pp" not in {a for s in plan.choice.values() for sh in (*s.inputs, *s.outputs) for a in sh.axes}
    with pytest.raises(NoPlanError, match="stages"):
        search(gpt.build(TINY.with_layers(1), 2), Mesh.parse("pp=64"), C)


def test_refining_stages_keeps_the_best_plan():
    """Each refinement round re-solves with segments weighed by their stage's nearness to the
    slowest; a round's plan is kept only when the whole 1F1B step is faster."""
    from akg.graph.parallel.search import _nearness

    assert _nearness(2.0, 2.0, None) == 1.0 and _nearness(1.9, 2.0, None) == 0.0
    assert _nearness(1.0, 2.0, 2.0) == 0.25 and _nearness(3.0, 0.0, 2.0) == 1.0
    g = gpt.build(TINY.with_layers(4), 2)
    times = [search(g, Mesh.parse("pp=2,dp=2"), C, microbatches=4, refine=r).predicted["step_time"] for r in (0, 1, 2)]
    assert times[2] <= times[1] <= times[0]


def test_search_is_never_worse_than_the_megatron_grid():
    def graph_of(dp, tp, pp):
        m = 2 * pp if pp > 1 else 1
        return gpt.build(TINY, 8 // m), m

    grid = grid_plans(graph_of, 4, C, gpt.megatron_pins)
    found = search_meshes(graph_of, 4, C)
    assert len(grid) == len(found) == len(factorisations(4))
    for g, s in zip(grid, found):
        assert (g.dp, g.tp, g.pp) == (s.dp, s.tp, s.pp)
        if g.plan is not None and g.pp == 1:  # the same mesh: the search's space contains the grid's
            assert s.step_time <= g.step_time * (1 + 1e-6)
    assert min(s.step_time for s in found) <= min(g.step_time for g in grid) * (1 + 1e-6)


@pytest.mark.slow
def test_search_time_grows_about_linearly_with_layers():
    spec = gpt.GptSpec("mid", 256, 1, 8, seq=64, vocab=512)
    times = {}
    for n in (12, 24, 48):
        g = gpt.build(spec.with_layers(n), 8)
        t = time.perf_counter()
        search(g, Mesh.parse("dp=2,tp=4"), C)
        times[n] = time.perf_counter() - t
    assert times[48] < 60
    assert times[48] < 6 * times[12] + 5


def test_a_small_step_is_solved_whole_and_beats_a_hand_plan(examples_dir):
    """Small programs are not cut down by following: the mlp step on tp=2 is at least as good
    as Megatron's pins propagated by hand (manual.propagated_plan), priced alike."""
    from akg.graph.io import load_model
    from akg.graph.parallel.manual import propagated_plan
    from akg.graph.train import train_step

    step = train_step(load_model(examples_dir / "mlp.mir"), "loss", optimizer="sgd", lr=0.1)
    mesh = Mesh.parse("tp=2")
    pins = {"fc1.weight": Sharding(((), ("tp",))), "fc1.bias": Sharding((("tp",),)),
            "fc2.weight": Sharding((("tp",), ()))}
    hand = evaluate(step, propagated_plan(step, mesh, pins), C).step_time
    assert search(step, mesh, C).predicted["step_time"] <= hand * (1 + 1e-6)
    assert search(step, mesh, C, pinned=pins).predicted["step_time"] <= hand * (1 + 1e-6)

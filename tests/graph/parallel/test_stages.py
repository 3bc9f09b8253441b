"""Pipeline stages (graph/parallel/spmd.spmd_stages, graph/parallel/stages.py): per-stage graphs
with send/recv, run together on simulated ranks, equal one device over training steps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from akg.errors import ShardingError
from akg.graph.builder import GraphBuilder
from akg.graph.interpreter import evaluate, random_inputs
from akg.graph.io import load_model
from akg.graph.io.mir import parse_mir
from akg.graph.parallel.manual import data_parallel_plan, pipeline_stages, propagated_plan, with_stages
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import Plan
from akg.graph.parallel.spmd import collective_counts, fed_back, shard_inputs, spmd_stages
from akg.graph.parallel.stages import (microbatch_phases, one_f_one_b, simulate_microbatches, simulate_stages,
                                       simulate_stages_plan, stage_inputs, stage_of_rank, unshard_stage_outputs)
from akg.graph.train import initial_state, run_step

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_spmd import (TOL, block_step, data, megatron_block, megatron_mlp, mlp_step,  # noqa: E402
                       run_steps_one_device)


def staged(step, mesh: str, cuts, pins=None):
    """A plan on `mesh` (its `pp` axis the pipeline): the rest of the mesh data parallel, or
    propagated from `pins`, the nodes cut after `cuts`."""
    full = Mesh.parse(mesh)
    sub = Mesh(tuple((n, s) for n, s in full.axes if n != "pp"))
    base = propagated_plan(step, sub, pins) if pins is not None else data_parallel_plan(step, sub)
    return with_stages(base, full, "pp", pipeline_stages(step, cuts))


def run_steps_staged(model, step, plan, batch, steps=3):
    """`steps` training steps of the stage graphs on simulated ranks, every stage keeping its
    state; the losses and the whole final outputs by name."""
    graphs = spmd_stages(step, plan)
    ranks = stage_inputs(graphs, plan, shard_inputs(step, plan, {**batch, **initial_state(model, step)}))
    losses = []
    for _ in range(steps):
        outs = simulate_stages(graphs, plan, ranks)
        whole = unshard_stage_outputs(step, plan, outs)
        losses.append(whole["loss"])
        for r, rank_outs in enumerate(outs):
            g = graphs[stage_of_rank(plan, r)]
            ranks[r].update({name: rank_outs[g.outputs[i].name] for i, name in fed_back(g).items()})
    return losses, whole, graphs


def check(model, step, plan, steps=3):
    batch = data(step)
    ref_losses, ref_state = run_steps_one_device(model, step, batch, steps)
    losses, whole, graphs = run_steps_staged(model, step, plan, batch, steps)
    np.testing.assert_allclose(losses, ref_losses, **TOL)
    for name, want in ref_state.items():
        np.testing.assert_allclose(whole["new." + name], want, err_msg=name, **TOL)
    return graphs


def p2p(g):
    return [(n.op, n.attrs["tag"], n.attrs["shift"]) for n in g.nodes if n.op in ("send", "recv")]


def test_mlp_step_two_stages():
    model, step = mlp_step()
    plan = staged(step, "pp=2", ["relu1"])
    first, second = check(model, step, plan)
    # the boundary activation goes forward, its cotangent back: nothing else crosses
    assert p2p(first) == [("send", "relu1", 1), ("recv", "grad.relu1", 1)]
    assert collective_counts(first) == {"send": 1, "recv": 1}
    assert p2p(second) == [("recv", "relu1", -1), ("send", "grad.relu1", -1)]
    assert {v.name for v in first.inputs} == {"x", "fc1.weight", "fc1.bias"}
    assert [v.name for v in first.outputs] == ["new.fc1.weight", "new.fc1.bias", "relu1.send1"]
    assert [v.name for v in second.outputs][0] == "loss"
    for g in (first, second):
        assert parse_mir(str(g)) == g  # ordinary graphs


@pytest.mark.parametrize("mesh,pins", [("dp=2,pp=2", None), ("pp=2,tp=2", megatron_mlp(None, "tp")),
                                       ("dp=2,pp=2,tp=2", megatron_mlp("dp", "tp"))])
def test_mlp_step_stages_with_data_and_tensor_parallel(mesh, pins):
    model, step = mlp_step()
    check(model, step, staged(step, mesh, ["relu1"], pins))


def test_transformer_block_two_stages():
    model, step = block_step()
    first, second = check(model, step, staged(step, "pp=2", ["attn_norm"]), steps=1)
    assert p2p(first)[0] == ("send", "attn_norm", 1)
    assert ("recv", "grad.attn_norm", 1) in p2p(first)


@pytest.mark.slow
@pytest.mark.parametrize("mesh,pins", [("dp=2,pp=2", None), ("pp=2,tp=2", megatron_block(None, "tp"))])
def test_transformer_block_stages_mixed(mesh, pins):
    model, step = block_step()
    check(model, step, staged(step, mesh, ["attn_norm"], pins))


def microbatched_reference(model, step, batches, steps):
    """One device: each step the mean loss of the microbatches and SGD on their mean gradient
    (the mean of the parameters each microbatch's own step gives, SGD being linear in it)."""
    state, losses = initial_state(model, step), []
    for _ in range(steps):
        results = [run_step(step, state, b) for b in batches]
        losses.append(np.mean([loss for loss, _ in results]))
        state = {k: np.mean([s[k] for _, s in results], axis=0).astype(state[k].dtype) for k in state}
    return losses, state


def run_microbatched(model, step, plan, batches, steps):
    """Steps of streamed microbatches on simulated ranks: losses and the whole outputs."""
    graphs = spmd_stages(step, plan)
    init = initial_state(model, step)
    per_mb = [stage_inputs(graphs, plan, shard_inputs(step, plan, {**init, **b})) for b in batches]
    state = [{k: a for k, a in per_mb[0][r].items() if k in init} for r in range(plan.mesh.size)]
    micro = [[{k: a for k, a in mb[r].items() if k not in init} for mb in per_mb] for r in range(plan.mesh.size)]
    losses = []
    for _ in range(steps):
        outs = simulate_microbatches(graphs, plan, state, micro)
        whole = unshard_stage_outputs(step, plan, outs)
        losses.append(whole["loss"])
        for r, rank_outs in enumerate(outs):
            g = graphs[stage_of_rank(plan, r)]
            state[r].update({name: rank_outs[g.outputs[i].name] for i, name in fed_back(g).items()})
    return losses, whole


@pytest.mark.parametrize("mesh,m,pins", [("pp=2", 3, None), ("dp=2,pp=2", 2, None),
                                         ("pp=2,tp=2", 4, megatron_mlp(None, "tp"))])
def test_mlp_step_microbatches_1f1b(mesh, m, pins):
    model, step = mlp_step()
    batches = [data(step, seed) for seed in range(m)]
    ref_losses, ref_state = microbatched_reference(model, step, batches, 3)
    losses, whole = run_microbatched(model, step, staged(step, mesh, ["relu1"], pins), batches, 3)
    np.testing.assert_allclose(losses, ref_losses, **TOL)
    for name, want in ref_state.items():
        np.testing.assert_allclose(whole["new." + name], want, err_msg=name, **TOL)


def test_microbatch_phases_and_1f1b_order():
    model, step = mlp_step()
    first, second = (microbatch_phases(g) for g in spmd_stages(step, staged(step, "pp=2", ["relu1"])))
    names = lambda g: [n.outputs[0].name for n in g.nodes]  # noqa: E731
    assert names(first.forward) == ["0", "fc1", "relu1", "relu1.send1", "grad.relu1.active"]
    assert names(first.backward) == ["grad.relu1", "grad.fc1", "grad.fc1.bias", "grad.fc1.weight"]
    assert first.accumulated == ("grad.fc1.weight", "grad.fc1.bias")
    assert second.backward is None and "grad.relu1.send0" in names(second.forward)
    params = ("fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias")
    assert set(names(second.update)) == {f"update.{p}.step" for p in params} | {f"new.{p}" for p in params}
    assert one_f_one_b(0, 2, 3) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)]
    assert one_f_one_b(1, 2, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]
    assert one_f_one_b(0, 4, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]


@pytest.mark.slow
def test_transformer_block_microbatches():
    model, step = block_step()
    batches = [data(step, seed) for seed in range(2)]
    ref_losses, ref_state = microbatched_reference(model, step, batches, 2)
    losses, whole = run_microbatched(model, step, staged(step, "pp=2", ["attn_norm"]), batches, 2)
    np.testing.assert_allclose(losses, ref_losses, **TOL)
    for name, want in ref_state.items():
        np.testing.assert_allclose(whole["new." + name], want, err_msg=name, **TOL)


def test_forward_model_three_stages():
    g = load_model("examples/mlp.mir")
    plan = with_stages(propagated_plan(g, Mesh(()), {}), Mesh.parse("pp=3"), "pp",
                       pipeline_stages(g, ["relu1", "relu2"]))
    ins = random_inputs(g, 0)
    got = simulate_stages_plan(g, plan, ins)
    for a, b in zip(got, evaluate(g, ins)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# --- errors -------------------------------------------------------------------------------------


def test_stage_plans_are_checked():
    model, step = mlp_step()
    plan = staged(step, "pp=2", ["relu1"])
    bad = Plan(plan.mesh, plan.choice, plan.inputs, stages=plan.stages[:1], pp_axis="pp")
    with pytest.raises(ShardingError, match=r"1 stages, its pipeline axis 'pp' 2 positions"):
        spmd_stages(step, bad)
    bad = Plan(plan.mesh, plan.choice, plan.inputs, stages=[plan.stages[0], plan.stages[1][1:]], pp_axis="pp")
    with pytest.raises(ShardingError, match=r"leave out 1 node\(s\), e.g. %1"):
        spmd_stages(step, bad)
    with pytest.raises(ShardingError, match=r"already splits over the pipeline axis 'pp'"):
        with_stages(data_parallel_plan(step, Mesh.parse("pp=2")), Mesh.parse("pp=2"), "pp", plan.stages)
    with pytest.raises(ShardingError, match=r"no node %nonesuch to cut after"):
        pipeline_stages(step, ["nonesuch"])


def test_stages_waiting_on_each_other_are_reported():
    graphs = []
    for k in range(2):
        b = GraphBuilder(f"s{k}")
        got = b.op("recv", mesh="pp=2", axes="pp", shift=1 - 2 * k, tag=f"v{1 - k}", shape=[2], dtype="float32",
                   name=f"v{1 - k}")
        b.output(b.op("send", got, mesh="pp=2", axes="pp", shift=1 - 2 * k, tag=f"v{k}"))
        graphs.append(b.build())
    plan = Plan(Mesh.parse("pp=2"), {}, {}, stages=[[], []], pp_axis="pp")
    with pytest.raises(ShardingError, match=r"the stages wait on each other: stage 0 at recv %v1, stage 1 at recv %v0"):
        simulate_stages(graphs, plan, [{}, {}])


@pytest.mark.parametrize("mesh", ["dp=2,pp=2", "pp=4"])
def test_searched_pipeline_plans_run(mesh):
    """The search's stage plans (with its microbatches) run and match one device."""
    search = pytest.importorskip("akg.graph.parallel.search").search
    model, step = mlp_step()
    plan = search(step, Mesh.parse(mesh))
    assert plan.stages is not None and len(plan.stages) == Mesh.parse(mesh).axis_size("pp")
    batches = [data(step, seed) for seed in range(plan.microbatches)]
    ref_losses, ref_state = microbatched_reference(model, step, batches, 2)
    losses, whole = run_microbatched(model, step, plan, batches, 2)
    np.testing.assert_allclose(losses, ref_losses, **TOL)
    for name, want in ref_state.items():
        np.testing.assert_allclose(whole["new." + name], want, err_msg=name, **TOL)

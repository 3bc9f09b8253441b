"""The SPMD rewrite (graph/parallel/spmd.py) on simulated ranks: per-rank graphs of the example
training steps under data, tensor (Megatron) and mixed plans equal one device; collective
counts of the known cases; the boundary (inputs, constants, outputs fed back); errors."""

from __future__ import annotations

import numpy as np
import pytest

from akg.errors import InputDataError, ShardingError, UnsupportedOpError
from akg.graph.builder import GraphBuilder
from akg.graph.interpreter import evaluate, random_inputs
from akg.graph.io import load_model
from akg.graph.io.mir import parse_mir
from akg.graph.parallel.manual import data_parallel_plan, propagated_plan
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import Plan
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.simulate import simulate
from akg.graph.parallel.spmd import (collective_counts, fed_back, shard_inputs, simulate_plan, spmd,
                                     unshard_outputs)
from akg.graph.parallel.strategy import Strategy
from akg.graph.pipeline import plan_model
from akg.graph.train import initial_state, run_step, train_step, with_mean_square_loss

TOL = dict(rtol=5e-4, atol=5e-4)

R = lambda rank: Sharding.replicated(rank)  # noqa: E731
col = lambda *axes: Sharding(((), tuple(axes)))  # noqa: E731  a matrix split by columns
row = lambda *axes: Sharding((tuple(axes), ()))  # noqa: E731  a matrix split by rows
vec = lambda *axes: Sharding((tuple(axes),))  # noqa: E731


# --- models -------------------------------------------------------------------------------------


def mlp_step():
    return load_model("examples/mlp.mir"), train_step(load_model("examples/mlp.mir"), "loss", optimizer="sgd", lr=0.1)


def block_step():
    model = with_mean_square_loss(load_model("examples/transformer_block.mir"))
    return model, train_step(model, "loss", optimizer="sgd", lr=0.05)


def data(step, seed=0):
    """A batch for `step` (its data inputs: the non-state ones)."""
    state = set(initial_state_names(step))
    return {k: a for k, a in random_inputs(step, seed).items() if k not in state}


def initial_state_names(step):
    return [v.name for v in step.inputs if any(o.name == "new." + v.name for o in step.outputs)]


def megatron_mlp(dp: str | None, tp: str):
    """fc1 split by columns, fc2 by rows over `tp`; the batch over `dp`."""
    pins = {"fc1.weight": col(tp), "fc1.bias": vec(tp), "fc2.weight": row(tp)}
    if dp:
        pins.update({"x": row(dp), "labels": vec(dp)})
    return pins


def megatron_block(dp: str | None, tp: str):
    """Heads split over `tp` (query/key/value by columns, the projection by rows), the FFN
    column then row; tokens over `dp`."""
    pins = {}
    for n in ("query", "key", "value", "ffn_in"):
        pins[f"{n}.weight"], pins[f"{n}.bias"] = col(tp), vec(tp)
    pins["attn_out.weight"], pins["ffn_out.weight"] = row(tp), row(tp)
    if dp:
        pins["x"] = row(dp)
    return pins


def run_steps_one_device(model, step, batch, steps=3):
    state = initial_state(model, step)
    losses = []
    for _ in range(steps):
        loss, state = run_step(step, state, batch)
        losses.append(loss)
    return losses, state


def run_steps_simulated(model, step, plan, batch, steps=3):
    """`steps` training steps of the per-rank graph on simulated ranks, the state staying
    sharded between steps; the losses and the final whole state."""
    per_rank = spmd(step, plan)
    feed = fed_back(per_rank)
    assert sorted(feed.values()) == sorted(initial_state_names(step))  # every new.X feeds X as it is
    ranks = shard_inputs(step, plan, {**batch, **initial_state(model, step)})
    losses = []
    for _ in range(steps):
        outs = simulate(per_rank, plan.mesh, ranks)
        whole = unshard_outputs(step, plan, outs)
        losses.append(whole[0])
        for r, rank_outs in enumerate(outs):
            ranks[r].update({name: rank_outs[i] for i, name in feed.items()})
    state = dict(zip([v.name[4:] for v in step.outputs[1:]], whole[1:]))
    return losses, state, per_rank


def agreement(got, want) -> tuple[float, float]:
    """(max abs error, max error relative to max |want|) over arrays."""
    err = max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)))) for g, w in zip(got, want))
    scale = max(float(np.max(np.abs(w))) for w in want)
    return err, err / max(scale, 1e-30)


def check_training(model, step, plan, steps=3):
    batch = data(step)
    ref_losses, ref_state = run_steps_one_device(model, step, batch, steps)
    losses, state, per_rank = run_steps_simulated(model, step, plan, batch, steps)
    np.testing.assert_allclose(losses, ref_losses, **TOL)
    for name, want in ref_state.items():
        np.testing.assert_allclose(state[name], want, err_msg=name, **TOL)
    return per_rank, agreement(losses, ref_losses), agreement([state[n] for n in ref_state], list(ref_state.values()))


# --- a two-layer MLP: the Megatron split --------------------------------------------------------


def two_layer(batch=8, d=16, h=32):
    b = GraphBuilder("mlp2")
    x, w1, w2 = b.input("x", (batch, d)), b.input("w1", (d, h)), b.input("w2", (h, d))
    b.output(b.op("matmul", b.op("relu", b.op("matmul", x, w1, name="h"), name="r"), w2, name="y"))
    return b.build()


def test_megatron_two_layer_mlp_has_one_all_reduce_and_reads_well():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=4"), {"w1": col("tp"), "w2": row("tp")})
    assert [plan.choice[k].name for k in ("h", "r", "y")] == ["n(tp)", plan.choice["r"].name, "k(tp)"]
    per_rank = spmd(g, plan)
    assert str(per_rank) == """\
graph @mlp2(%x: f32[8,16], %w1: f32[16,8], %w2: f32[8,16]) {
  %h = matmul(%x, %w1) : f32[8,8]
  %r = relu(%h) : f32[8,8]
  %y.local = matmul(%r, %w2) : f32[8,16]
  %y = all_reduce(%y.local) {mesh="tp=4", axes="tp"} : f32[8,16]
  return %y
}
"""
    assert parse_mir(str(per_rank)) == per_rank  # an ordinary graph: prints and parses back
    ins = random_inputs(g, 1)
    np.testing.assert_allclose(simulate_plan(g, plan, ins)[0], evaluate(g, ins)[0], rtol=1e-5, atol=1e-5)


def test_collectives_are_no_kernels():
    per_rank = spmd(two_layer(), propagated_plan(two_layer(), Mesh.parse("tp=2"), {"w1": col("tp"), "w2": row("tp")}))
    with pytest.raises(UnsupportedOpError, match=r"'all_reduce'.*collective op of a per-rank SPMD graph.*--processes"):
        plan_model(per_rank)


# --- the training steps of the examples ----------------------------------------------------------


@pytest.mark.parametrize("mesh", ["dp=2", "dp=4", "dp=8"])
def test_mlp_step_data_parallel(mesh):
    model, step = mlp_step()
    plan = data_parallel_plan(step, Mesh.parse(mesh))
    per_rank, (loss_abs, _), (param_abs, param_rel) = check_training(model, step, plan)
    params = initial_state_names(step)
    # one all-reduce per parameter gradient, one for the loss; nothing else moves
    assert collective_counts(per_rank) == {"all_reduce": len(params) + 1}
    reduced = [n.inputs[0].name for n in per_rank.nodes if n.op == "all_reduce"]
    assert sorted(reduced) == sorted([f"update.{p}.step" for p in params] + ["loss.local"])
    assert loss_abs <= 1e-6  # float32 summation order only


@pytest.mark.parametrize("mesh,dp,tp", [("tp=2", None, "tp"), ("tp=4", None, "tp"), ("dp=2,tp=2", "dp", "tp"),
                                        ("dp=2,tp=4", "dp", "tp"), ("dp=4,tp=2", "dp", "tp")])
def test_mlp_step_megatron(mesh, dp, tp):
    model, step = mlp_step()
    m = Mesh.parse(mesh)
    plan = propagated_plan(step, m, megatron_mlp(dp, tp))
    per_rank, _, _ = check_training(model, step, plan)
    forward = [n for n in per_rank.nodes if n.op == "all_reduce" and not n.output.name.startswith(("grad", "update"))
               and n.output.name != "loss"]
    # the layer pair fc1 (columns) + fc2 (rows) costs one all-reduce over tp in the forward pass
    assert [(n.inputs[0].name, n.attrs["axes"]) for n in forward] == [("1", "tp")]
    # every parameter split over tp stays split: its new value needs no gather
    assert not any(n.op == "all_gather" and n.output.name.startswith("new.") for n in per_rank.nodes)
    if dp:  # the replicated parameters' gradients are all-reduced over dp, the split ones too
        grads = {n.inputs[0].name for n in per_rank.nodes if n.op == "all_reduce" and n.attrs["axes"] == "dp"}
        assert {f"update.{p}.step" for p in initial_state_names(step)} <= grads


@pytest.mark.slow
@pytest.mark.parametrize("mesh,dp,tp", [("dp=2", "dp", None), ("tp=4", None, "tp"), ("dp=2,tp=2", "dp", "tp"),
                                        ("dp=2,tp=4", "dp", "tp")])
def test_transformer_block_step(mesh, dp, tp):
    model, step = block_step()
    m = Mesh.parse(mesh)
    plan = data_parallel_plan(step, m) if tp is None else propagated_plan(step, m, megatron_block(dp, tp))
    check_training(model, step, plan)


def test_transformer_block_step_megatron_tp2():
    model, step = block_step()
    plan = propagated_plan(step, Mesh.parse("tp=2"), megatron_block(None, "tp"))
    per_rank, _, _ = check_training(model, step, plan, steps=1)
    # attention and FFN: one all-reduce each in the forward pass (after the row-split projections)
    fwd = [n.inputs[0].name for n in per_rank.nodes if n.op == "all_reduce" and n.inputs[0].name in ("3", "5")]
    assert sorted(fwd) == ["3", "5"]


# --- the boundary -------------------------------------------------------------------------------


def test_inputs_have_local_shapes_and_new_state_feeds_back():
    model, step = mlp_step()
    plan = propagated_plan(step, Mesh.parse("dp=2,tp=2"), megatron_mlp("dp", "tp"))
    per_rank = spmd(step, plan)
    types = {v.name: v.shape for v in per_rank.inputs}
    assert types["x"] == (16, 784) and types["fc1.weight"] == (784, 128) and types["fc2.weight"] == (128, 128)
    assert types["fc3.weight"] == (128, 10)
    outs = {v.name: v for v in per_rank.outputs}
    for v in per_rank.inputs:
        if "new." + v.name in outs:
            assert outs["new." + v.name].type == v.type


def test_plan_outputs_and_constants():
    """A constant stored split is sliced once; an output asked for split is delivered split."""
    b = GraphBuilder("c")
    x = b.input("x", (4, 8))
    w = b.const(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, name="w")
    b.output(b.op("matmul", x, w, name="y"))
    g = b.build()
    mesh = Mesh.parse("tp=2")
    plan = propagated_plan(g, mesh, {"w": col("tp")}, outputs={"y": col("tp")})
    per_rank = spmd(g, plan)
    assert [n.op for n in per_rank.nodes] == ["shard_slice", "matmul"]
    assert per_rank.outputs[0].shape == (4, 4) and per_rank.outputs[0].name == "y"
    ins = random_inputs(g, 0)
    np.testing.assert_allclose(simulate_plan(g, plan, ins)[0], evaluate(g, ins)[0], rtol=1e-6)


def test_replicas_that_disagree_are_caught():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=2"), {"w1": col("tp"), "w2": row("tp")})
    outs = simulate(spmd(g, plan), plan.mesh, shard_inputs(g, plan, random_inputs(g, 0)))
    outs[1][0] = outs[1][0] + 1
    with pytest.raises(ShardingError, match=r"output %y \(\[R, R\]\): ranks 0 and 1 hold different data"):
        unshard_outputs(g, plan, outs)


# --- errors -------------------------------------------------------------------------------------


def test_plan_without_a_node_names_it():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=2"), {})
    del plan.choice["r"]
    with pytest.raises(ShardingError, match=r"no strategy for 'relu' producing %r"):
        spmd(g, plan)


def test_strategy_that_does_not_fit_its_node():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=2"), {})
    plan.choice["r"] = Strategy("bad", (col("tp"), col("tp")), (col("tp"),))
    with pytest.raises(ShardingError, match=r"'relu' producing %r \(strategy bad.*2 inputs"):
        spmd(g, plan)
    plan.choice["r"] = Strategy("wrong local", (col("tp"),), (col("tp"),), attrs=None,
                                local=lambda e, vals, attrs, mesh: e.op("transpose", vals[0], perm=[1, 0]))
    with pytest.raises(ShardingError, match=r"gives %r as f32\[16,8\], its sharding \[R, S\(tp\)\] needs f32\[8,16\]"):
        spmd(g, plan)


def test_pipeline_stages_need_spmd_stages():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("pp=2"), {})
    plan.stages, plan.pp_axis = [["h"], ["r", "y"]], "pp"
    with pytest.raises(ShardingError, match=r"2 pipeline stages over 'pp': one program per stage, see spmd_stages"):
        spmd(g, plan)


def test_plan_naming_unknown_values():
    g = two_layer()
    choice = propagated_plan(g, Mesh.parse("tp=2"), {}).choice
    with pytest.raises(ShardingError, match=r"lays out %w3, which is no input or constant of 'mlp2'"):
        spmd(g, Plan(Mesh.parse("tp=2"), choice, {"w3": col("tp")}))
    plan = propagated_plan(g, Mesh.parse("tp=2"), {}, outputs={"z": col("tp")})
    with pytest.raises(ShardingError, match=r"lays out %z, which is no output"):
        spmd(g, plan)


def test_uneven_split_is_refused():
    g = two_layer(batch=6)
    with pytest.raises(ShardingError, match=r"input %x: dim 0 of size 6 does not split evenly over dp \(4 devices\)"):
        spmd(g, Plan(Mesh.parse("dp=4"), {}, {"x": row("dp")}))


def test_missing_input_data():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=2"), {})
    with pytest.raises(InputDataError, match="missing input"):
        shard_inputs(g, plan, {"x": np.zeros((8, 16), np.float32)})


@pytest.mark.parametrize("mesh", ["dp=2,tp=2", "tp=4"])
def test_searched_plans_run(mesh):
    """The search's plans for the mlp step, rewritten, match one device."""
    search = pytest.importorskip("akg.graph.parallel.search").search
    model, step = mlp_step()
    check_training(model, step, search(step, Mesh.parse(mesh)))

"""akg.distributed: per-rank graphs cut into compiled segments and collectives, run on local
gloo processes; training steps of the examples match one device; failures name the rank.

The default runs use 2 and 4 processes on the mlp step (each run spawns, compiles on every
rank and takes ~10-25 s on 2 cores); 8 processes and the transformer block are slow."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from akg.distributed import run_distributed
from akg.errors import ClusterError, InputDataError, RankFailedError, RankTimeoutError
from akg.graph.parallel.manual import data_parallel_plan, propagated_plan
from akg.graph.parallel.mesh import Mesh
from akg.graph.train import initial_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph" / "parallel"))
from test_spmd import (TOL, agreement, block_step, data, megatron_block, megatron_mlp, mlp_step,  # noqa: E402
                       run_steps_one_device, two_layer)
from test_stages import microbatched_reference, staged  # noqa: E402



def check_run(model, step, plan, steps=3):
    """`steps` SGD steps on processes against one device; the run and the agreement numbers."""
    batch = data(step)
    ref_losses, ref_state = run_steps_one_device(model, step, batch, steps)
    run = run_distributed(step, plan, {**batch, **initial_state(model, step)}, steps=steps)
    losses = [h["loss"] for h in run.history]
    state = dict(zip(run.names, run.outputs))
    np.testing.assert_allclose(losses, ref_losses, **TOL)
    for name, want in ref_state.items():
        np.testing.assert_allclose(state["new." + name], want, err_msg=name, **TOL)
    loss_err = agreement(losses, ref_losses)
    param_err = agreement([state["new." + n] for n in ref_state], list(ref_state.values()))
    print(f"\n{plan.mesh}: loss max abs {loss_err[0]:.2e} rel {loss_err[1]:.2e}; params after {steps} steps "
          f"max abs {param_err[0]:.2e} rel {param_err[1]:.2e}; step {min(run.step_s) * 1e3:.1f} ms, "
          f"compile {run.compile_s:.1f} s, {dict(run.collectives)}")
    return run, loss_err, param_err


@pytest.mark.slow  # the 4-process dp x tp run covers the default run; data parallel on 2 and 8 with -m slow
def test_mlp_step_data_parallel_2_processes():
    model, step = mlp_step()
    run, (loss_abs, _), _ = check_run(model, step, data_parallel_plan(step, Mesh.parse("dp=2")))
    assert run.collectives == {"all_reduce": 7}  # six parameter gradients and the loss
    assert loss_abs <= 1e-6  # float32 summation order only


def test_mlp_step_megatron_dp2_tp2_4_processes():
    model, step = mlp_step()
    mesh = Mesh.parse("dp=2,tp=2")
    run, _, _ = check_run(model, step, propagated_plan(step, mesh, megatron_mlp("dp", "tp")))
    assert run.collectives["all_reduce"] >= 2 and run.processes == 4


@pytest.mark.slow
def test_mlp_step_pipeline_2_processes():
    """Two stages: the boundary activation goes forward, its cotangent back."""
    model, step = mlp_step()
    run, _, _ = check_run(model, step, staged(step, "pp=2", ["relu1"]))
    assert run.collectives == {"send": 1, "recv": 1} and len(run.programs) == 2


@pytest.mark.parametrize("mesh,m", [("pp=2", 3), pytest.param("dp=2,pp=2", 2, marks=pytest.mark.slow)])
def test_mlp_step_pipeline_microbatches_1f1b(mesh, m):
    """Microbatches streamed through two stages (1F1B), one update on their mean gradient."""
    model, step = mlp_step()
    batches = [data(step, seed) for seed in range(m)]
    whole = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    ref_losses, ref_state = microbatched_reference(model, step, batches, 3)
    run = run_distributed(step, staged(step, mesh, ["relu1"]), {**whole, **initial_state(model, step)},
                          steps=3, microbatches=m)
    losses = [h["loss"] for h in run.history]
    np.testing.assert_allclose(losses, ref_losses, **TOL)
    for name, want in ref_state.items():
        np.testing.assert_allclose(run.outputs[run.names.index("new." + name)], want, err_msg=name, **TOL)
    assert run.collectives["send"] == run.collectives["recv"] == m  # per step: one each way per microbatch
    params = agreement([run.outputs[run.names.index("new." + n)] for n in ref_state], list(ref_state.values()))
    print(f"\n{mesh}, {m} microbatches: loss max abs {agreement(losses, ref_losses)[0]:.2e}; params max abs "
          f"{params[0]:.2e}")


def test_microbatches_need_a_training_step():
    g = two_layer()
    with pytest.raises(InputDataError, match="microbatches stream a training step"):
        run_distributed(g, propagated_plan(g, Mesh.parse("tp=2"), {}), {}, microbatches=2)


@pytest.mark.slow
@pytest.mark.parametrize("mesh,pins", [("dp=2,pp=2", None), ("dp=2,pp=2,tp=2", megatron_mlp("dp", "tp"))])
def test_mlp_step_pipeline_mixed_processes(mesh, pins):
    model, step = mlp_step()
    check_run(model, step, staged(step, mesh, ["relu1"], pins))


@pytest.mark.slow
def test_transformer_block_pipeline_processes():
    model, step = block_step()
    check_run(model, step, staged(step, "pp=2", ["attn_norm"]))


def test_a_failing_rank_is_named_and_nothing_hangs():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=2"), {})
    ins = {v.name: np.ones(v.shape, np.float32) for v in g.inputs}
    with pytest.raises(RankFailedError, match=r"rank 1 of 2 failed: RuntimeError: injected fault") as e:
        run_distributed(g, plan, ins, fault=("raise", 1), timeout_s=30)
    assert isinstance(e.value, ClusterError) and "_fault" in e.value.rank_traceback
    import multiprocessing

    assert multiprocessing.active_children() == []  # every rank stopped and reaped


@pytest.mark.slow
def test_a_dead_rank_is_named():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=2"), {})
    ins = {v.name: np.ones(v.shape, np.float32) for v in g.inputs}
    with pytest.raises(RankFailedError, match=r"rank 0 of 2 died \(exit code 3\) without a report"):
        run_distributed(g, plan, ins, fault=("exit", 0), timeout_s=30)


@pytest.mark.slow
def test_a_hanging_rank_times_out():
    g = two_layer()
    plan = propagated_plan(g, Mesh.parse("tp=2"), {})
    ins = {v.name: np.ones(v.shape, np.float32) for v in g.inputs}
    with pytest.raises(RankTimeoutError, match=r"rank\(s\) 1 of 2 did not answer in time \(hung\?\): rank 0 waited"):
        run_distributed(g, plan, ins, fault=("hang", 1), timeout_s=8)


@pytest.mark.slow
@pytest.mark.parametrize("mesh", ["dp=8", "dp=2,tp=4", "tp=4"])
def test_mlp_step_8_and_4_processes(mesh):
    model, step = mlp_step()
    m = Mesh.parse(mesh)
    plan = data_parallel_plan(step, m) if "tp" not in mesh else \
        propagated_plan(step, m, megatron_mlp("dp" if "dp" in mesh else None, "tp"))
    check_run(model, step, plan)


@pytest.mark.slow
@pytest.mark.parametrize("mesh", ["dp=2", "tp=2", "dp=2,tp=2"])
def test_transformer_block_step_processes(mesh):
    model, step = block_step()
    m = Mesh.parse(mesh)
    plan = data_parallel_plan(step, m) if "tp" not in mesh else \
        propagated_plan(step, m, megatron_block("dp" if "dp" in mesh else None, "tp"))
    check_run(model, step, plan)


# --- akg run --processes ------------------------------------------------------------------------


def _cli(capsys, *args):
    from akg.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("args,message", [
    (["--mesh", "dp=2"], "--mesh needs --processes N"),
    (["--processes", "4", "--mesh", "dp=2,tp=4"], "mesh dp=2,tp=4 has 8 devices, --processes is 4"),
    (["--processes", "2", "--mesh", "dp=2", "--target", "nonesuch"], "nonesuch"),
    (["--processes", "4", "--mesh", "dp=4,x"], "bad mesh"),
])
def test_cli_processes_usage_errors(capsys, args, message):
    code, out = _cli(capsys, "run", "examples/mlp.mir", *args)
    assert code != 0 and message in out


def test_cli_processes_refuses_packs(capsys, tmp_path):
    code, out = _cli(capsys, "run", str(tmp_path / "m.akgpack"), "--processes", "2")
    assert code == 2 and "--processes runs a model file" in out


@pytest.mark.slow
def test_cli_run_on_processes_checks_against_the_reference(capsys, tmp_path):
    code, out = _cli(capsys, "run", "examples/mlp.mir", "--mesh", "dp=2", "--processes", "2", "--check",
                     "-o", str(tmp_path / "out.npz"))
    assert code == 0, out
    assert "akg on 2 processes, mesh dp=2" in out.replace("\n", " ") and "check passed: 2 output(s)" in out
    assert set(np.load(tmp_path / "out.npz").files) == {"fc3", "loss"}


@pytest.mark.slow
def test_cli_run_with_a_searched_pipeline_plan(capsys):
    code, out = _cli(capsys, "run", "examples/mlp.mir", "--mesh", "dp=2,pp=2", "--processes", "4", "--check")
    assert code == 0, out
    flat = " ".join(out.split())
    assert "mesh dp=2,pp=2" in flat and "stages" in flat and "check passed: 2 output(s)" in flat


"""The `akg` command line: show, run, --version, and one-line errors with exit codes."""

import subprocess
import sys

import numpy as np
import pytest

from akg import __version__
from akg.cli import checksum, main


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    code, out, _ = _run(capsys, "--version")
    assert code == 0 and __version__ in out


def test_show_prints_ops_parameters_and_flops(capsys, examples_dir):
    code, out, err = _run(capsys, "show", str(examples_dir / "mlp.mir"))
    assert code == 0, err
    assert "matmul x3" in out and "cross_entropy x1" in out
    assert "parameters: 235,146" in out  # 784*256+256 + 256*128+128 + 128*10+10
    flops = 2 * 32 * (784 * 256 + 256 * 128 + 128 * 10)
    assert f"FLOPs: {flops + 32 * (256 + 128 + 10) * 1 + 32 * (256 + 128) + 6 * 320:,}" in out


def test_run_random_inputs_is_deterministic_and_writes_npz(capsys, examples_dir, tmp_path):
    out_npz = tmp_path / "out.npz"
    code, out, err = _run(capsys, "run", str(examples_dir / "mlp.mir"), "--output", str(out_npz))
    assert code == 0, err
    assert "random (seed 0)" in out and "f32[32,10]" in out
    with np.load(out_npz) as npz:
        assert set(npz.files) == {"fc3", "loss"}
        assert checksum(npz["fc3"]) in out
    code, out2, _ = _run(capsys, "run", str(examples_dir / "mlp.mir"))
    assert out2.split("wrote")[0].replace(str(out_npz), "") in out


def test_run_with_inputs_file(capsys, examples_dir, tmp_path):
    x = np.zeros((32, 784), np.float32)
    labels = np.zeros(32, np.int32)
    np.savez(tmp_path / "in.npz", x=x, labels=labels)
    code, out, err = _run(capsys, "run", str(examples_dir / "mlp.mir"), "--inputs", str(tmp_path / "in.npz"),
                          "--output", str(tmp_path / "o.npz"))
    assert code == 0, err
    with np.load(tmp_path / "o.npz") as npz:
        # zero input: logits are the bias path only, identical for every row
        assert np.allclose(npz["fc3"], npz["fc3"][0])


@pytest.mark.parametrize(
    "text, code, message",
    [
        ("graph @g(%x: f32[2]) {\n  %y = frob(%x) : f32[2]\n  return %y\n}\n", 4, "m.mir:2:8: unknown op 'frob'"),
        ("graph @g(%x: f32[2]) {\n  %y = relu(%x) : f32[3]\n  return %y\n}\n", 3, "m.mir:2:3: %y = relu(...) is declared"),
        ("graph @g(%x: f32[2]) {\n  %y = relu(%x : f32[2]\n", 3, "m.mir:2:16: expected ','"),
    ],
)
def test_errors_are_one_line_with_exit_code(capsys, tmp_path, text, code, message):
    (tmp_path / "m.mir").write_text(text)
    got, out, err = _run(capsys, "run", str(tmp_path / "m.mir"))
    assert got == code
    assert err.strip().startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_inputs_file_and_unknown_format(capsys, examples_dir, tmp_path):
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 2), np.float32))
    code, _, err = _run(capsys, "run", str(examples_dir / "mlp.mir"), "--inputs", str(tmp_path / "in.npz"))
    assert code == 3 and "missing input(s): labels" in err
    code, _, err = _run(capsys, "run", str(examples_dir / "mlp.mir"), "--inputs", str(tmp_path / "none.npz"))
    assert code == 3 and "none.npz: no such file" in err
    (tmp_path / "m.onnx2").write_text("")
    code, _, err = _run(capsys, "show", str(tmp_path / "m.onnx2"))
    assert code == 3 and "unknown model format '.onnx2'" in err
    code, _, err = _run(capsys, "show", str(tmp_path / "gone.mir"))
    assert code == 3 and "no such file" in err


def test_usage_errors_exit_2(capsys):
    code, _, err = _run(capsys, "run")
    assert code == 2 and "Missing argument" in err


def test_console_script_and_debug_traceback(tmp_path):
    (tmp_path / "m.mir").write_text("graph @g(%x: f32[2]) {\n  %y = frob(%x) : f32[2]\n  return %y\n}\n")
    plain = subprocess.run([sys.executable, "-m", "akg", "show", str(tmp_path / "m.mir")],
                           capture_output=True, text=True)
    assert plain.returncode == 4 and "Traceback" not in plain.stderr
    debug = subprocess.run([sys.executable, "-m", "akg", "show", str(tmp_path / "m.mir"), "--debug"],
                           capture_output=True, text=True)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "UnknownOpError" in debug.stderr


# --- akg grad -------------------------------------------------------------------------------


def test_grad_writes_a_graph_of_loss_and_gradients(capsys, examples_dir, tmp_path):
    from akg.graph import evaluate, random_inputs
    from akg.graph.autodiff import grad
    from akg.graph.io import load_mir

    out = tmp_path / "train.mir"
    code, stdout, err = _run(capsys, "grad", str(examples_dir / "mlp.mir"), "--loss", "loss", "--wrt", "params",
                             "-o", str(out))
    assert code == 0, err
    assert "6 gradient(s)" in stdout and "%grad.fc1.weight: f32[784,256]" in stdout
    assert (tmp_path / "train.npz").exists()
    written = load_mir(out)
    assert [v.name for v in written.outputs] == ["loss", *(f"grad.fc{i}.{p}" for i in (1, 2, 3)
                                                          for p in ("weight", "bias"))]
    model = load_mir(examples_dir / "mlp.mir")
    inputs = random_inputs(model, 0)
    for a, b in zip(evaluate(written, inputs), evaluate(grad(model, "loss"), inputs)):
        np.testing.assert_array_equal(a, b)


def test_grad_with_a_wrt_list(capsys, examples_dir, tmp_path):
    out = tmp_path / "g.mir"
    code, stdout, err = _run(capsys, "grad", str(examples_dir / "mlp.mir"), "--loss", "loss",
                             "--wrt", "fc3.bias, %x", "-o", str(out))
    assert code == 0, err
    assert "%grad.fc3.bias: f32[10]" in stdout and "%grad.x: f32[32,784]" in stdout


def test_grad_training_step_runs_from_its_initial_state(capsys, examples_dir, tmp_path):
    from akg.graph import evaluate, random_inputs
    from akg.graph.io import load_mir

    out = tmp_path / "step.mir"
    code, stdout, err = _run(capsys, "grad", str(examples_dir / "mlp.mir"), "--loss", "loss",
                             "--optimizer", "adam", "--lr", "1e-3", "--betas", "0.8,0.99", "-o", str(out))
    assert code == 0, err
    assert "inputs x, labels (data) and 19 state value(s)" in stdout
    step = load_mir(out)
    with np.load(tmp_path / "step.init.npz") as npz:
        state = {k: npz[k] for k in npz.files}
    assert set(state) == {v.name for v in step.inputs} - {"x", "labels"}
    assert state["opt.step"] == 0 and not state["opt.m.fc1.weight"].any()
    data = {k: v for k, v in random_inputs(step, 0).items() if k in ("x", "labels")}
    outs = dict(zip((v.name for v in step.outputs), evaluate(step, {**data, **state})))
    assert outs["new.opt.step"] == 1
    # the first Adam step moves every weight by about lr (m/sqrt(v) = sign(g))
    moved = np.abs(outs["new.fc1.weight"] - state["fc1.weight"])
    assert np.median(moved[moved > 0]) == pytest.approx(1e-3, rel=0.05)


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--loss", "lost"], 3, "error: loss: graph 'mlp' has no value %lost"),
        (["--loss", "fc3"], 3, "error: the loss %fc3 must be a floating-point scalar, it is f32[32,10]"),
        (["--loss", "loss", "--wrt", "fc1.weight,nope"], 3, "error: wrt: graph 'mlp' has no value %nope"),
        (["--loss", "loss", "--wrt", "labels"], 3, "cannot differentiate with respect to %labels"),
        (["--loss", "loss", "--optimizer", "adam", "--wrt", "x"], 3, "param %x is not a constant of graph 'mlp'"),
        (["--loss", "loss", "--optimizer", "rmsprop"], 4, "error: no optimizer for 'rmsprop' (known: adam, sgd)"),
        (["--loss", "loss", "--optimizer", "adam", "--momentum", "0.9"], 3,
         "error: optimizer 'adam' has no setting 'momentum' (its settings: lr, betas, eps)"),
        (["--loss", "loss", "--lr", "0.1"], 2, "--lr needs --optimizer"),
        (["--loss", "loss", "--optimizer", "adam", "--betas", "0.9"], 2, "expected two numbers"),
        (["--wrt", "params"], 2, "Missing option '--loss'"),
    ],
)
def test_grad_errors_are_typed_one_liners(capsys, examples_dir, tmp_path, args, code, message):
    got, _, err = _run(capsys, "grad", str(examples_dir / "mlp.mir"), *args, "-o", str(tmp_path / "o.mir"))
    assert got == code
    assert message in err and "Traceback" not in err
    if code != 2:
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.mir").exists()


def test_grad_of_a_loss_that_depends_on_no_parameter_is_an_error(capsys, tmp_path):
    # it wrote the loss alone ("0 gradient(s)") and exited 0
    (tmp_path / "m.mir").write_text("graph @g(%x: f32[5]) {\n  %h = mul(%x, %x) : f32[5]\n"
                                    "  %l = sum(%h) : f32[]\n  return %l\n}\n")
    got, _, err = _run(capsys, "grad", str(tmp_path / "m.mir"), "--loss", "l", "-o", str(tmp_path / "o.mir"))
    assert got == 3 and "depends on no trainable parameter" in err and "--wrt" in err
    assert not (tmp_path / "o.mir").exists()


@pytest.mark.parametrize("module", ["akg.cli", "akg.cli_tuning", "akg.cli_report"])
def test_each_command_module_imports_first_in_a_fresh_interpreter(module):
    # akg.cli registers the other command modules when it loads; one imported first must not
    # meet a half-made sibling (cli_report once took DB_HELP from a half-loaded cli_tuning)
    done = subprocess.run([sys.executable, "-c", f"import {module}, akg.cli; print(sorted(akg.cli.cli.commands))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"tune", "db", "report"} <= set(eval(done.stdout)), done.stdout

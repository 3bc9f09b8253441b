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

"""The command-line defects of issue 16, replayed through `akg.cli.main` (as tests/akg/test_cli.py
does; one subprocess where a pipe matters): each asserts the exit code, a one-line message and
no traceback.

Numeric options are checked at the edge (exit 2); `--check` judges every output, NaN-aware, and
exits 5 on a failure, also for an .akgpack; `--inputs` merges several files; `-o`/`--output`
create missing folders and refuse an unwritable path before any work; `akg tune` prints a line
per round without a terminal and a summary naming the database and the speed-ups; `akg show
--fusion` uses the model's own names; `akg db ls` names its database and prints whole keys;
MemoryError / RecursionError / NumPy allocation errors are typed one-liners, not exit 70.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from akg.cli import main
from akg.graph import GraphBuilder
from akg.graph.io import save_mir


def _run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str, prefix: str = "error: ") -> str:
    """The message of a typed error: exactly one line on stderr, no traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix), err
    return lines[0]


def _usage_error(err: str) -> str:
    """Click's usage error: usage lines, then exactly one `Error: ...` line; no traceback."""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """tiny.mir: relu(x @ w + b) with a weight the layout pass stores as panels; pair.mir: a + b."""
    root = tmp_path_factory.mktemp("models")
    rng = np.random.default_rng(0)
    b = GraphBuilder("tiny")
    x = b.input("x", (8, 16))
    w = b.const(rng.standard_normal((16, 64)).astype(np.float32), name="fc.weight")
    bias = b.const(rng.standard_normal(64).astype(np.float32), name="fc.bias")
    b.output(b.relu(b.add(b.matmul(x, w), bias), name="y"))
    save_mir(b.build(), root / "tiny.mir")
    b = GraphBuilder("pair")
    b.output(b.add(b.input("a", (2, 3)), b.input("b", (2, 3)), name="s"))
    save_mir(b.build(), root / "pair.mir")
    return root


@pytest.fixture(scope="module")
def pack(models, tmp_path_factory):
    """tiny.mir compiled into an .akgpack with its reference graph (the default)."""
    path = tmp_path_factory.mktemp("pack") / "tiny.akgpack"
    assert main(["compile", str(models / "tiny.mir"), "-o", str(path), "--db", str(path.with_suffix(".db"))]) == 0
    return path


# --- 1. numeric options are validated at the command line -------------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (["tune", "{m}", "--trials", "-1"], "--trials"),
        (["tune", "{m}", "--trials", "0"], "--trials"),
        (["tune", "{m}", "--batch", "0"], "--batch"),
        (["tune", "{m}", "--batch", "-3"], "--batch"),
        (["tune", "{m}", "--timeout", "-1"], "--timeout"),
        (["tune", "{m}", "--timeout", "0"], "--timeout"),
        (["tune", "{m}", "--timeout", "nan"], "--timeout"),
        (["tune", "{m}", "--seed", "-1"], "--seed"),
        (["run", "{m}", "--seed", "-1"], "--seed"),
        (["run", "{m}", "--seed", str(2**40)], "--seed"),
        (["run", "{m}", "--target", "cpu", "--check", "--rtol", "-1"], "--rtol"),
        (["run", "{m}", "--target", "cpu", "--check", "--atol", "inf"], "--atol"),
        (["grad", "{m}", "--loss", "y", "--optimizer", "sgd", "--lr", "-0.1", "-o", "{o}"], "--lr"),
        (["grad", "{m}", "--loss", "y", "--optimizer", "sgd", "--momentum", "-1", "-o", "{o}"], "--momentum"),
        (["grad", "{m}", "--loss", "y", "--optimizer", "adam", "--eps", "nan", "-o", "{o}"], "--eps"),
        (["grad", "{m}", "--loss", "y", "--optimizer", "adam", "--betas", "0.9,1.0", "-o", "{o}"], "--betas"),
    ],
)
def test_numeric_options_are_usage_errors(capsys, models, tmp_path, args, option):
    db = tmp_path / "t.db"
    argv = [a.format(m=models / "tiny.mir", o=tmp_path / "g.mir") for a in args]
    if argv[0] == "tune":
        argv += ["--db", str(db)]
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert option in _usage_error(err)
    assert "new measurements" not in out
    assert not db.exists()  # refused before the database is opened: no "timeout: ... -1s" records
    assert not (tmp_path / "g.mir").exists()


# --- 2. --check: NaN-aware, a verdict per output, exit 5, also for .akgpack files ------------------


def test_nan_aware_error_and_verdicts():
    from akg.verify import Reference, check_outputs, nan_aware_error

    assert nan_aware_error(np.array([np.nan, 1.0]), np.array([1.0, 1.0])) == np.inf
    assert nan_aware_error(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) == 0.0
    assert nan_aware_error(np.array([np.inf]), np.array([-np.inf])) == np.inf
    ref = Reference([np.array([1.0, 1.0], np.float32)], [np.array([1.0, 1.0])])
    (bad,) = check_outputs(["y"], [np.array([np.nan, 1.0], np.float32)], ref)
    assert not bad.ok and bad.bad == 1 and bad.nan_only_got == 1 and bad.max_error == np.inf
    assert str(bad).startswith("%y: FAIL: 1 of 2 elements differ")
    (inf,) = check_outputs(["y"], [np.array([np.inf, 1.0], np.float32)], ref)
    assert not inf.ok
    (good,) = check_outputs(["y"], [np.array([1.0, 1.0 + 1e-6], np.float32)], ref)
    assert good.ok and (good.rtol, good.atol) == (1e-4, 1e-5)  # the float32 defaults
    (tight,) = check_outputs(["y"], [np.array([1.0, 1.001], np.float32)], ref, rtol=0.0, atol=1e-6)
    assert not tight.ok
    both = Reference([np.array([np.nan, 2.0], np.float32)], [np.array([np.nan, 2.0])])
    (nan,) = check_outputs(["y"], [np.array([np.nan, 2.0], np.float32)], both)
    assert nan.ok and nan.nan_both == 1 and "NaN in both" in str(nan)
    ints = Reference([np.array([1, 2], np.int32)], [np.array([1, 2])])
    (wrong,) = check_outputs(["i"], [np.array([1, 3], np.int32)], ints)
    assert not wrong.ok and "(exact)" in str(wrong)


def test_check_prints_a_verdict_per_output(capsys, models):
    code, out, err = _run(capsys, "run", models / "tiny.mir", "--target", "cpu", "--check")
    assert code == 0, err
    assert "check %y: pass: max error" in out and "(rtol 0.0001, atol 1e-05)" in out
    assert "check passed: 1 output(s) match the reference interpreter" in out


def test_check_fails_with_exit_5_on_a_nan_the_reference_lacks(capsys, models, monkeypatch):
    import akg.api

    real = akg.api.compile_model

    class Broken:  # a compiled model whose first output element comes out NaN
        def __init__(self, model):
            self.model, self.calls = model, model.calls

        def __call__(self, **inputs):
            outs = [o.copy() for o in self.model(**inputs)]
            outs[0].flat[0] = np.nan
            return outs

    monkeypatch.setattr(akg.api, "compile_model", lambda *a, **k: Broken(real(*a, **k)))
    code, out, err = _run(capsys, "run", models / "tiny.mir", "--target", "cpu", "--check")
    assert code == 5
    assert "check %y: FAIL: 1 of 512 elements differ, 1 NaN/inf where the reference is finite" in out
    assert "max error inf" in out
    assert _one_line_error(err) == ("error: check failed: 1 of 1 output(s) differ from the reference "
                                    "interpreter: %y")


def test_check_options_need_their_context(capsys, models, pack):
    code, _, err = _run(capsys, "run", models / "tiny.mir", "--check")
    assert code == 2 and "--check compares a compiled run" in _usage_error(err)
    code, _, err = _run(capsys, "run", models / "tiny.mir", "--target", "cpu", "--rtol", "1e-3")
    assert code == 2 and "--rtol needs --check" in _usage_error(err)
    code, _, err = _run(capsys, "run", pack, "--target", "cpu")
    assert code == 2 and "drop --target" in _usage_error(err)


def test_akgpack_check_uses_the_graph_the_pack_carries(capsys, pack, monkeypatch):
    code, out, err = _run(capsys, "run", pack, "--check")
    assert code == 0, err
    assert "check %y: pass" in out and "check passed" in out
    code, out, err = _run(capsys, "run", pack, "--check", "--rtol", "1e-3", "--atol", "1e-4")
    assert code == 0 and "(rtol 0.001, atol 0.0001)" in out

    from akg.runtime import CompiledModel

    real = CompiledModel.__call__

    def broken(self, *args, **named):
        outs = real(self, *args, **named)
        outs[0] = outs[0] + 1.0
        return outs

    monkeypatch.setattr(CompiledModel, "__call__", broken)
    code, out, err = _run(capsys, "run", pack, "--check")
    assert code == 5 and "check %y: FAIL: 512 of 512 elements differ" in out
    assert "error: check failed" in _one_line_error(err)
    code, out, err = _run(capsys, "run", pack)  # without --check nothing is compared
    assert code == 0 and "check %" not in out


def test_akgpack_without_its_graph_cannot_be_checked(capsys, models, tmp_path):
    path = tmp_path / "bare.akgpack"
    code, out, err = _run(capsys, "compile", models / "tiny.mir", "-o", path, "--no-reference",
                          "--db", tmp_path / "t.db")
    assert code == 0, err
    assert "without the model's graph" in out
    code, out, err = _run(capsys, "run", path, "--check")
    assert code == 3
    message = _one_line_error(err)
    assert "--check cannot run" in message and "carries no copy of its model's graph" in message
    assert "outputs of" not in out  # refused before running
    assert _run(capsys, "run", path)[0] == 0  # the pack itself still runs


# --- 3. --inputs: several files, merged ------------------------------------------------------------


def test_inputs_from_several_files(capsys, models, tmp_path):
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
    np.savez(tmp_path / "a.npz", a=a)
    np.savez(tmp_path / "b.npz", b=b)
    code, out, err = _run(capsys, "run", models / "pair.mir", "--inputs", tmp_path / "a.npz",
                          "--inputs", tmp_path / "b.npz", "-o", tmp_path / "s.npz")
    assert code == 0, err
    assert "a.npz + " in out
    with np.load(tmp_path / "s.npz") as npz:
        np.testing.assert_array_equal(npz["s"], a + b)

    np.savez(tmp_path / "ab.npz", a=a, b=b)
    code, _, err = _run(capsys, "run", models / "pair.mir", "--inputs", tmp_path / "a.npz",
                        "--inputs", tmp_path / "ab.npz")
    assert code == 3 and "input a is in both" in _one_line_error(err)
    np.savez(tmp_path / "c.npz", c=a)
    code, _, err = _run(capsys, "run", models / "pair.mir", "--inputs", tmp_path / "ab.npz",
                        "--inputs", tmp_path / "c.npz")
    assert code == 3 and "unknown input(s) c (in " in _one_line_error(err)
    code, _, err = _run(capsys, "run", models / "pair.mir", "--inputs", tmp_path / "a.npz")
    assert code == 3 and "missing input(s): b" in _one_line_error(err)
    code, _, err = _run(capsys, "run", models / "pair.mir", "--inputs", tmp_path / "a.npz",
                        "--inputs", tmp_path / "a.npz")
    assert code == 2 and "is given twice" in _usage_error(err)


def test_an_inputs_file_that_is_not_an_npz_archive_is_named(capsys, models, tmp_path):
    np.save(tmp_path / "a.npy", np.ones((2, 3), np.float32))
    (tmp_path / "a.txt").write_text("1 2 3\n")
    import zipfile

    with zipfile.ZipFile(tmp_path / "raw.npz", "w") as z:
        z.writestr("a", "not an array")
    cases = {"a.npy": "a.npy is not an .npz archive but a single .npy array",
             "a.txt": "a.txt is not an .npz archive (a zip of named .npy arrays)",
             "raw.npz": "raw.npz: member 'a' is not a .npy array"}
    for name, message in cases.items():
        code, _, err = _run(capsys, "run", models / "pair.mir", "--inputs", tmp_path / name)
        assert code == 3 and message in _one_line_error(err)
        assert "numpy.savez(" in err


def test_training_step_runs_from_its_initial_state_and_data(capsys, examples_dir, tmp_path):
    step = tmp_path / "step.mir"
    assert _run(capsys, "grad", examples_dir / "mlp.mir", "--loss", "loss", "--optimizer", "adam",
                "-o", step)[0] == 0
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((32, 784)).astype(np.float32),
             labels=rng.integers(0, 10, 32).astype(np.int32))
    code, _, err = _run(capsys, "run", step, "--inputs", tmp_path / "step.init.npz",
                          "--inputs", tmp_path / "data.npz", "-o", tmp_path / "next.npz")
    assert code == 0, err
    with np.load(tmp_path / "next.npz") as npz:
        assert npz["new.opt.step"] == 1 and np.isfinite(npz["new.fc1.weight"]).all()


# --- 4 and 7. output paths: folders created, unwritable paths refused before the work -------------


def test_outputs_into_missing_folders_are_created(capsys, models, examples_dir, tmp_path):
    out = tmp_path / "new" / "deeper" / "o.npz"
    code, stdout, err = _run(capsys, "run", models / "pair.mir", "--output", out)
    assert code == 0, err
    assert out.exists() and f"wrote {out}" in stdout
    code, _, err = _run(capsys, "run", models / "pair.mir", "-o", tmp_path / "new2" / "o")
    assert code == 0 and (tmp_path / "new2" / "o.npz").exists()  # as np.savez names it, and says so
    code, _, err = _run(capsys, "convert", models / "pair.mir", "-o", tmp_path / "conv" / "p.mir")
    assert code == 0, err
    assert (tmp_path / "conv" / "p.mir").exists()
    code, _, err = _run(capsys, "grad", examples_dir / "mlp.mir", "--loss", "loss", "-o", tmp_path / "g" / "g.mir")
    assert code == 0, err
    assert (tmp_path / "g" / "g.mir").exists() and (tmp_path / "g" / "g.npz").exists()
    code, _, err = _run(capsys, "db", "export", tmp_path / "ex" / "r.jsonl", "--db", tmp_path / "t.db")
    assert code == 0, err
    assert (tmp_path / "ex" / "r.jsonl").exists()


def test_compile_into_a_missing_folder_writes_the_pack(capsys, models, tmp_path):
    out = tmp_path / "build" / "out" / "tiny.akgpack"
    code, stdout, err = _run(capsys, "compile", models / "tiny.mir", "-o", out, "--db", tmp_path / "t.db")
    assert code == 0, err
    assert out.exists() and f"wrote {out}" in stdout


def test_compile_writes_the_pack_it_is_told_or_says_why_not(capsys, models, tmp_path):
    # `-o o.txt` wrote o.akgpack, and `-o FOLDER` FOLDER.akgpack beside it, without a word
    for out, what in [(tmp_path / "o.txt", "ends in .txt"), (tmp_path, "is a folder")]:
        code, _, err = _run(capsys, "compile", models / "pair.mir", "-o", out, "--db", tmp_path / "t.db")
        assert code == 2 and what in _usage_error(err) and "akgpack" in _usage_error(err)
    assert not list(tmp_path.parent.glob("*.akgpack")) and not list(tmp_path.glob("*.akgpack"))
    code, stdout, _ = _run(capsys, "compile", models / "pair.mir", "-o", tmp_path / "pair", "--db", tmp_path / "t.db")
    assert code == 0 and f"wrote {tmp_path / 'pair.akgpack'}" in stdout  # no suffix: the pack's is added


def test_tune_fails_when_a_kernel_fails_every_config(capsys, tmp_path):
    # every trial failed (here: no NPU instruction for an integer division) and `akg tune` said
    # "raise --trials" and exited 0, so a nightly job passed on a model it cannot compile
    b = GraphBuilder("intdiv")
    b.output(b.div(b.input("x", (17,), "int32"), b.input("y", (17,), "int32")))
    save_mir(b.build(), tmp_path / "intdiv.mir")
    code, _, err = _run(capsys, "tune", tmp_path / "intdiv.mir", "--target", "npu", "--trials", "2",
                        "--db", tmp_path / "t.db")
    assert code == 5, err
    assert "failed every config measured (intdiv.k0_div)" in err.splitlines()[-1]
    assert "intdiv.k0_div: build_error:" in err  # the first failure's reason


def test_bfloat16_outputs_are_written_as_float32(capsys, tmp_path):
    # np.savez wrote a bfloat16 array as raw bytes (|V2): the type was lost
    import ml_dtypes

    b = GraphBuilder("half")
    b.output(b.cast(b.input("x", (4,)), to="bfloat16", name="y"))
    save_mir(b.build(), tmp_path / "half.mir")
    code, stdout, err = _run(capsys, "run", tmp_path / "half.mir", "--target", "cpu", "-o", tmp_path / "out.npz")
    assert code == 0, err
    assert "y as float32, exactly" in stdout
    from akg.graph.interpreter import random_inputs

    x = random_inputs(b.build(), 0)["x"]  # `akg run`'s inputs (seed 0)
    with np.load(tmp_path / "out.npz") as out:
        assert out["y"].dtype == np.float32
        assert np.array_equal(out["y"], x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_unwritable_outputs_are_refused_before_compiling(capsys, models, examples_dir, tmp_path, monkeypatch):
    import akg.api

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled before checking the output path")

    monkeypatch.setattr(akg.api, "compile_model", no_compiling)
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        ["compile", models / "tiny.mir", "-o", blocker / "m.akgpack", "--db", tmp_path / "t.db"],
        ["compile", models / "tiny.mir", "-o", blocker / "sub" / "m", "--db", tmp_path / "t.db"],
        ["run", models / "tiny.mir", "--target", "cpu", "--output", blocker / "o.npz"],
        ["grad", examples_dir / "mlp.mir", "--loss", "loss", "-o", blocker / "g.mir"],
        ["convert", models / "pair.mir", "-o", blocker / "p.mir"],
        ["db", "export", blocker / "r.jsonl", "--db", tmp_path / "t.db"],
    ]
    for argv in cases:
        code, out, err = _run(capsys, *argv)
        assert code == 3, (argv, err)
        message = _one_line_error(err)
        assert "it is a file" in message or "is a folder" in message, message
        assert "internal error" not in err and "outputs of" not in out
    code, _, err = _run(capsys, "run", models / "tiny.mir", "-o", tmp_path)  # a folder where a file is meant
    assert code == 2 and "is a directory" in _usage_error(err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_folder_is_refused(capsys, models, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, _, err = _run(capsys, "run", models / "pair.mir", "-o", locked / "sub" / "o.npz")
        assert code == 3 and "is not writable" in _one_line_error(err)
    finally:
        locked.chmod(0o700)


# --- 7. the safety net: resource errors are typed one-liners ---------------------------------------


@pytest.mark.parametrize(
    "exc, message",
    [
        (MemoryError(), "error: out of memory"),
        (MemoryError("Unable to allocate 2.8 PiB"), "error: out of memory (Unable to allocate 2.8 PiB)"),
        (RecursionError("maximum recursion depth exceeded"), "error: the input is nested too deeply"),
        (ValueError("Maximum allowed dimension exceeded"), "error: a tensor is too large to allocate"),
        (ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size."),
         "error: a tensor is too large to allocate"),
    ],
)
def test_resource_errors_are_typed(capsys, models, monkeypatch, exc, message):
    import akg.graph.io

    def explode(*args, **kwargs):
        raise exc

    monkeypatch.setattr(akg.graph.io, "load_model", explode)
    code, _, err = _run(capsys, "show", models / "tiny.mir")
    assert code == 3
    assert _one_line_error(err).startswith(message)


def test_other_bugs_stay_internal_errors(capsys, models, monkeypatch):
    import akg.graph.io

    def explode(*args, **kwargs):
        raise ValueError("operands could not be\nbroadcast together")

    monkeypatch.setattr(akg.graph.io, "load_model", explode)
    code, _, err = _run(capsys, "show", models / "tiny.mir")
    assert code == 70
    assert _one_line_error(err, "internal error: ") == (
        "internal error: ValueError: operands could not be broadcast together (rerun with --debug for the traceback)")


@pytest.mark.parametrize(
    "text",
    [
        "graph @g(%x: f32[1000000000000,4]) {\n  %y = relu(%x) : f32[1000000000000,4]\n  return %y\n}\n",
        "graph @g(%x: f32[9223372036854775807,4]) {\n  %y = relu(%x) : f32[9223372036854775807,4]\n  return %y\n}\n",
        "graph @g(%x: f32[1]) {\n  %c: f32[1] = const " + "[" * 100000 + "1" + "]" * 100000
        + "\n  %y = add(%x, %c) : f32[1]\n  return %y\n}\n",
    ],
    ids=["batch-1e12", "batch-2^63", "nested-100000"],
)
def test_huge_and_deep_models_are_not_internal_errors(capsys, tmp_path, text):
    (tmp_path / "m.mir").write_text(text)
    code, _, err = _run(capsys, "run", tmp_path / "m.mir")
    assert code == 3, err
    _one_line_error(err)


# --- 5 and 6. tune without a terminal, its summary, db ls -------------------------------------------


def _mm(path, n=32):
    b = GraphBuilder("mm")
    b.output(b.relu(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))
    save_mir(b.build(), path)
    return path


def _in_process_tuner(monkeypatch, tmp_path):
    """The tuner's own in-process builder and runner instead of its worker pools (fast)."""
    import akg.tuner.tune as tune_module
    from akg.tuner.builder import InProcessBuilder
    from akg.tuner.runner import InProcessRunner

    monkeypatch.setattr(tune_module, "LocalBuilder", lambda: InProcessBuilder(str(tmp_path)))
    monkeypatch.setattr(tune_module, "LocalRunner", lambda timeout: InProcessRunner(min_seconds=0.001, repeats=1))


def test_tune_without_a_terminal_logs_each_round_and_sums_up(capsys, tmp_path, monkeypatch):
    _in_process_tuner(monkeypatch, tmp_path)
    model, db = _mm(tmp_path / "mm.mir"), tmp_path / "t.db"
    code, out, err = _run(capsys, "tune", model, "--trials", "4", "--batch", "2", "--db", db,
                          "--cost-model", "random", "--search", "random")
    assert code == 0, err
    rounds = [line for line in out.splitlines() if line.startswith("[")]
    assert [r.split()[0] for r in rounds] == ["[2/4", "[4/4"]
    for line in rounds:  # kernel, trials so far, best so far, speed-up over the default
        assert "mm" in line and "+2 measured" in line and ", best " in line
        assert "over the default (" in line or "default not measured yet" in line or "default config failed" in line
    assert "over the default (" in rounds[-1]  # the first round measures the default config
    assert f"database: sqlite:///{db}" in out.splitlines()[-1]
    assert "speed-up" in out and "default" in out
    assert "model: " in out and "with the default configs: " in out and "x faster" in out

    # resumed with the budget spent: defaults come from the database, nothing is invented
    code, out, _ = _run(capsys, "tune", model, "--trials", "4", "--db", db)
    assert code == 0 and "0 new measurements" in out and "with the default configs: " in out

    from akg.db import open_database

    (workload,) = open_database(str(db)).workloads()
    code, out, _ = _run(capsys, "db", "ls", "--db", db)
    assert code == 0
    assert out.splitlines()[0] == f"database: sqlite:///{db}"
    assert workload.key in out and "…" not in out  # whole keys, whatever the width


def test_default_trial_says_whether_the_default_was_measured():
    from akg.cli_tuning import default_trial
    from akg.schedules.space import Config
    from akg.tuner.task import Trial

    default, other = Config("smart", None), Config("none", ())

    class Task:
        def __init__(self, trials):
            self.trials = trials

        def default_config(self):
            return default

    assert default_trial(Task([Trial(other, "ok", 1.0)])) == ("unmeasured", None)
    assert default_trial(Task([Trial(default, "error", None)])) == ("failed", None)
    assert default_trial(Task([Trial(other, "ok", 1.0), Trial(default, "ok", 2.0)])) == ("ok", 2.0)


def test_a_killed_tune_leaves_its_log_lines(tmp_path):
    """Piped (no terminal), each round's line is flushed at once: SIGKILL after the first one
    has arrived, and it was in the pipe."""
    model = _mm(tmp_path / "mm.mir")
    script = textwrap.dedent(f"""
        import sys
        import akg.tuner.tune as t
        from akg.tuner.builder import InProcessBuilder
        from akg.tuner.runner import InProcessRunner
        t.LocalBuilder = lambda: InProcessBuilder({str(tmp_path)!r})
        t.LocalRunner = lambda timeout: InProcessRunner(min_seconds=0.001, repeats=1)
        from akg.cli import main
        sys.exit(main(["tune", {str(model)!r}, "--trials", "400", "--batch", "2", "--db", {str(tmp_path / "t.db")!r},
                       "--cost-model", "random", "--search", "random"]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("[2/400"):
                break
        assert lines and lines[0].startswith("tuning mm.mir on ") and "database sqlite:///" in lines[0], lines
        assert lines[-1].startswith("[2/400"), lines
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def test_show_fusion_uses_the_models_own_names(capsys, examples_dir, models):
    code, out, err = _run(capsys, "show", examples_dir / "mlp.mir", "--fusion")
    assert code == 0, err
    assert ".panels" not in out and ".kmajor" not in out and ".kn" not in out
    assert "%fc1.weight: f32[784,256] (stored as panels f32[" in out
    assert "ops:    %0=matmul, %fc1=add, %relu1=relu" in out
    assert "expanded: %loss.* are parts of %loss = cross_entropy" in out
    code, out, _ = _run(capsys, "show", models / "tiny.mir", "--fusion")
    assert code == 0 and "%fc.weight: f32[16,64] (stored as panels" in out and ".panels:" not in out


@pytest.mark.parametrize("command", [[], ["tune"], ["run"], ["compile"], ["show"], ["grad"], ["convert"],
                                     ["db"], ["db", "ls"]])
def test_every_help_page_prints(capsys, command):
    # the option types (e.g. finite floats) render their metavars with this click version
    code, out, err = _run(capsys, *command, "--help")
    assert code == 0 and "Usage:" in out and "Traceback" not in err and "internal error" not in err


def test_compile_of_a_model_shows_each_kernels_source(capsys, models, tmp_path):
    """--show-source and --asm on a model print every distinct kernel (they printed nothing)."""
    code, out, err = _run(capsys, "compile", models / "tiny.mir", "--show-source", "--db", tmp_path / "t.db")
    assert code == 0, err
    assert out.count("# kernel tiny.") == 1 and "@T.prim_func" in out
    code, out, err = _run(capsys, "compile", models / "tiny.mir", "--asm", "--db", tmp_path / "t.db")
    assert code == 0, err
    assert "# kernel tiny." in out and "@T.prim_func" not in out and len(out.splitlines()) > 20

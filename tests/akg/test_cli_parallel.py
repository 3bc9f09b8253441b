"""`akg parallel`: the plan, its predicted time and memory, --explain, pins, and typed errors
(a bad mesh exits 3, a plan that does not fit exits 8)."""

import pytest

from akg.cli import main
from akg.cli_parallel import ByteSize

SMALL = ["gpt-350m", "--layers", "1", "--batch", "1"]


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_time_memory_and_explain(capsys):
    code, out, err = _run(capsys, "parallel", *SMALL, "--mesh", "dp=2,tp=2", "--explain")
    assert code == 0, err
    assert "predicted step time" in out and "memory per device" in out and "of 80.00 GiB" in out
    assert "l*.q.weight" in out  # the parameter table
    assert "layer 0 [embed .. embed]" in out  # --explain: per layer
    assert "communication per step" in out
    assert any(op in out for op in ("all_reduce(", "all_gather(", "reduce_scatter("))


def test_pins_and_pipeline(capsys):
    code, out, err = _run(capsys, "parallel", "gpt-350m", "--layers", "2", "--batch", "2", "--mesh", "pp=2,tp=2",
                          "--microbatches", "4", "--pin", "wte=[S(tp), R]")
    assert code == 0, err
    assert "pipeline over pp: 2 stages" in out and "4 microbatches" in out
    assert any(line.split("│")[1].strip() == "wte" and "[S(tp), R]" in line for line in out.splitlines()
               if line.count("│") >= 3)


def test_a_model_file(capsys, examples_dir):
    code, out, err = _run(capsys, "parallel", str(examples_dir / "mlp.mir"), "--mesh", "tp=2", "--cluster", "a100@25")
    assert code == 0, err
    assert "a100@25Gb" in out and "predicted step time" in out


def test_bad_mesh_exits_3(capsys):
    code, _, err = _run(capsys, "parallel", *SMALL, "--mesh", "dp=2,tp")
    assert code == 3 and "bad mesh" in err


def test_bad_pin_exits_3(capsys):
    code, _, err = _run(capsys, "parallel", *SMALL, "--mesh", "tp=2", "--pin", "wte=[S(dp), R]")
    assert code == 3 and "no axis 'dp'" in err


def test_plan_that_does_not_fit_exits_8(capsys):
    code, _, err = _run(capsys, "parallel", *SMALL, "--mesh", "tp=2", "--memory", "64MiB")
    assert code == 8 and "GiB" in err


def test_unknown_model_and_cluster(capsys):
    code, _, err = _run(capsys, "parallel", "gpt-7t", "--mesh", "tp=2")
    assert code == 3 and "gpt-350m" in err
    code, _, err = _run(capsys, "parallel", *SMALL, "--mesh", "tp=2", "--cluster", "tpu")
    assert code == 3 and "known: a100" in err


@pytest.mark.parametrize("text, value", [("16GiB", 16 << 30), ("80GB", 80e9), ("512MiB", 512 << 20), ("1e9", 1e9)])
def test_byte_sizes(text, value):
    assert ByteSize().convert(text, None, None) == value

"""The CLI on the CUDA targets: `akg compile --target=cuda --show-source` prints each kernel's
CUDA C (nvcc-compiled here, no GPU needed), `akg run --target cuda-emu --check` runs a model
in the emulation and checks it."""

import shutil

import numpy as np
import pytest

from akg.cli import main
from akg.graph import GraphBuilder
from akg.graph.io import save_mir


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda_models")
    rng = np.random.default_rng(0)
    b = GraphBuilder("tiny")
    x = b.input("x", (8, 16))
    w = b.const(rng.standard_normal((16, 64)).astype(np.float32), name="fc.weight")
    h = b.relu(b.add(b.matmul(x, w), b.const(rng.standard_normal(64).astype(np.float32), name="fc.bias")))
    b.output(b.softmax(h, axis=-1, name="y"))
    save_mir(b.build(), root / "tiny.mir")
    return root / "tiny.mir"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_compile_for_cuda_shows_the_cuda_source(capsys, model, tmp_path):
    code = main(["compile", str(model), "--target=cuda", "--show-source", "--db", str(tmp_path / "t.db")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "# kernel tiny." in out and 'extern "C" __global__ void' in out and "threadIdx.x" in out
    assert "@T.prim_func" not in out


def test_run_on_the_emulation_checks_against_the_reference(capsys, model, tmp_path):
    code = main(["run", str(model), "--target", "cuda-emu", "--check"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "check passed: 1 output(s) match the reference" in out

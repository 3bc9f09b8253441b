"""ONNX models exported by PyTorch from real architectures (scripts/onnx_torch_models.py: a
ResNet, a BERT-style encoder, an MLP over int64 tokens), imported and compiled by akg for cpu,
match PyTorch's own outputs to 1e-5 of max|expected|; `akg run MODEL.onnx --check` agrees."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch")

import akg  # noqa: E402
from akg.cli import main as cli_main  # noqa: E402

TOLERANCE = 1e-5  # of max|expected|, as the shared corpus's fixtures are compared


@pytest.fixture(scope="module")
def exported(load_script, tmp_path_factory):
    script = load_script("onnx_torch_models")
    folder = tmp_path_factory.mktemp("torch_onnx")
    return {name: script.export(name, folder) for name in script.MODELS}


@pytest.mark.parametrize("name", ["resnet", "bert", "token_mlp"])
def test_a_pytorch_export_matches_pytorch(exported, name):
    path, inputs, expected = exported[name]
    compiled = akg.compile(path, target="cpu")
    assert [s.dtype for s in compiled.inputs] == [str(x.dtype) for x in inputs]  # int64 ids stay int64
    outputs = compiled(*inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        error = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
        assert error <= TOLERANCE, f"{name}: {error:.2e} of max|expected|"


def test_the_bert_export_keeps_its_structure(exported):
    """The shape subgraphs PyTorch writes (Shape/Gather/Concat/Reshape) fold away at import:
    what is left is the encoder's arithmetic: one softmax per layer, a layer norm's rsqrt for
    each of the five (embeddings, two per layer), the pooler's tanh."""
    from akg.graph.io import load_model

    graph = load_model(exported["bert"][0])
    ops = [n.op for n in graph.nodes]
    assert ops.count("softmax") == 2 and ops.count("rsqrt") == 5 and ops.count("tanh") == 1
    assert not {"shape", "concat", "range"} & set(ops)


def test_akg_run_checks_an_exported_model(exported, tmp_path, capsys):
    path, inputs, _ = exported["token_mlp"]
    np.savez(tmp_path / "in.npz", ids=inputs[0])
    assert cli_main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--target", "cpu", "--check"]) in (0, None)
    assert "check passed" in capsys.readouterr().out

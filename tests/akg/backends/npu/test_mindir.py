"""The shared corpus's MindIR fixtures compiled for npu and run in the simulator, against the
outputs MindSpore recorded (`<name>.io.npz`). Those the backend does not map yet must stay
refused with a typed CompileError that names the kernel and statement, never a wrong result."""

import numpy as np
import pytest

from akg.api import compile_model
from akg.errors import CompileError

REFUSED = {
    # fp32 convolutions run on the vector path, where a 3x3 / 5x5 window's column offset is
    # an unaligned vector start (the cube takes fp16 convs only)
    "lenet5": r"lenet5_k0_conv2d.*not aligned",
    "resnet_block": r"resnet_block_k0_conv2d.*not aligned",
}


@pytest.mark.parametrize("name", ["add", "relu", "mlp", "lenet5", "resnet_block", "transformer_layer"])
def test_mindir_fixture_on_npu(name, corpus):
    from akg.graph.io import load_model

    graph = load_model(corpus / "mindir" / f"{name}.mindir")
    with np.load(corpus / "mindir" / f"{name}.io.npz") as npz:
        data = {k: npz[k] for k in npz.files}
    inputs = {v.name: data[f"input_{i}"] for i, v in enumerate(graph.inputs)}
    if name in REFUSED:
        with pytest.raises(CompileError, match=REFUSED[name]):
            compile_model(graph, target="npu")
        return
    model = compile_model(graph, target="npu")
    outputs = model(**inputs)
    assert len(outputs) == sum(1 for k in data if k.startswith("output_"))
    for i, got in enumerate(outputs):
        want = data[f"output_{i}"]
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(scale, 1.0))

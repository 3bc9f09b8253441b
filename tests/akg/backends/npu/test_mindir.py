"""The shared corpus's MindIR fixtures compiled for npu and run in the simulator, against the
outputs MindSpore recorded (`<name>.io.npz`). Those the backend does not map yet must stay
refused with a typed CompileError that names the kernel and statement, never a wrong result."""

import numpy as np
import pytest

from akg.api import compile_model
from akg.errors import CompileError

# name -> the typed error (a regex) of a fixture the backend does not map yet; none today (the
# fp32 convolutions of lenet5 and resnet_block run on the vector path with their windowed input
# unfolded in UB, `backend.Window`)
REFUSED: dict[str, str] = {}


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


@pytest.mark.parametrize("name", ["lenet5", "resnet_block"])
def test_mindir_fp32_convs_run_on_the_vector_path_without_races(name, corpus):
    """The fixtures' fp32 convolutions (5x5 and 3x3 windows, padding) stay off the cube (no fp16
    computation of fp32 data); their kernels and the poolings of up to 5 000 dynamic
    instructions pass the simulator's race detector (it takes minutes on larger ones, lenet5's
    second conv with 19 528: ~90 instructions/s; the unit tests of `test_conv_vector.py` check
    races on every window shape)."""
    from akg.backends.npu.sim import simulate
    from akg.graph.io import load_model

    model = compile_model(load_model(corpus / "mindir" / f"{name}.mindir"), target="npu")
    convs = {c.kernel for c in model.calls if "conv2d" in c.name}
    windows = convs | {c.kernel for c in model.calls if "pool" in c.name}
    assert convs
    checked = 0
    for key in windows:
        exe = model.kernels[key].executable
        assert "mmad" not in exe.program.listing()
        if simulate(exe.program, exe.spec, functional=False, races=False).report.instructions <= 5000:
            assert simulate(exe.program, exe.spec, functional=True, races=True).report.cycles > 0
            checked += 1
    assert checked >= 2

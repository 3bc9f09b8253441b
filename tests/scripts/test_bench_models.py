"""The whole-model benchmark's built models (scripts/bench/torch_models.py): the graphs have the
architecture's structure, and tiny instances compiled by akg match the reference interpreter.
The torch side (the same graph as a torch function) is checked where torch is installed."""

import numpy as np
import pytest

from akg.api import compile_model
from akg.graph import evaluate, random_inputs
from akg.graph.fuse import partition
from akg.verify import Reference, compare


@pytest.fixture(scope="module")
def zoo(load_script):
    return load_script("bench/torch_models")


def _ops(graph, op):
    return [n for n in graph.nodes if n.op == op]


def test_resnet18_has_its_twenty_convolutions_and_twenty_two_kernels(zoo):
    graph = zoo.resnet18(width=16, image=32, batch=2, classes=10)
    convs = _ops(graph, "conv2d")
    assert len(convs) == 20  # stem, 8 blocks x 2, 3 downsampling shortcuts
    assert [c.inputs[1].shape for c in convs[:1]] == [(16, 3, 7, 7)]
    assert convs[-1].outputs[0].shape == (2, 128, 1, 1)
    # each conv with its batch norm, relu and residual; max pool; fc (the global pool of the 1x1
    # image left is an identity: `simplify`)
    assert len(partition(graph)) == 22
    (logits,) = evaluate(graph, random_inputs(graph, 0))
    assert logits.shape == (2, 10) and np.isfinite(logits).all() and logits.std() > 0.1


def test_mobilenet_blocks_are_expand_depthwise_project_with_residuals(zoo):
    graph = zoo.mobilenetv2_blocks(channels=24, image=56)
    convs = _ops(graph, "conv2d")
    assert [c.attrs["groups"] for c in convs] == [1, 144, 1] * 3
    assert [c.inputs[1].shape[2] for c in convs] == [1, 3, 1] * 3
    assert len(_ops(graph, "add")) == 2  # the residuals of the two blocks that keep their shape
    assert graph.outputs[0].shape == (1, 32, 28, 28)


def test_bert_layer_has_the_attention_and_feed_forward_shapes(zoo):
    graph = zoo.bert(layers=2, seq=32, hidden=128, heads=2, ffn=512)
    matmuls = _ops(graph, "matmul")
    assert len(matmuls) == 12 and matmuls[4].inputs[1].shape == (128, 512)
    assert [n.outputs[0].shape for n in _ops(graph, "batch_matmul")][:2] == [(2, 32, 32), (2, 32, 64)]
    assert len(_ops(graph, "layer_norm")) == 4


TINY = {
    "resnet18": lambda z: z.resnet18(width=4, image=16, batch=1, classes=3),
    "mobilenetv2": lambda z: z.mobilenetv2_blocks(channels=6, image=8),
    "bert": lambda z: z.bert(layers=1, seq=8, hidden=64, heads=2, ffn=64),
}


@pytest.mark.parametrize("name", TINY)
def test_tiny_instances_compiled_by_akg_match_the_interpreter(zoo, name):
    graph = TINY[name](zoo)
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_attention_with_sixteen_wide_heads_compiles(zoo):
    # the context kernel (batch_matmul + transpose + reshape into [8, 32]) once divided by zero
    # in TVM's vectoriser (the iterator values astgen now simplifies)
    graph = zoo.bert(layers=1, seq=8, hidden=32, heads=2, ffn=64)
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_every_benchmark_model_name_builds(zoo):
    assert set(zoo.BUILT_MODELS) == {"resnet18_224", "resnet18_w16_32", "mobilenetv2_blocks", "bert_base_layer",
                                     "bert2_h128"}


@pytest.mark.parametrize("name", TINY)
def test_torch_function_of_the_graph_matches_the_interpreter(load_script, zoo, name):
    torch = pytest.importorskip("torch")
    models = load_script("bench/models")
    graph = TINY[name](zoo)
    inputs = random_inputs(graph, 0)
    fn = models.torch_function(graph)
    with torch.no_grad():
        got = fn(*(torch.from_numpy(inputs[v.name]) for v in graph.inputs))
    assert compare(graph, [t.numpy() for t in got], Reference.of(graph, inputs)) == []

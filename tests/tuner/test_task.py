"""A tuning task's default config is the one `akg.compiler.build` takes for the same kernel (the
tuner re-times its pick against it, and `akg compile` never uses a config slower than it)."""

import pytest

from akg.compiler import build
from akg.graph import GraphBuilder
from akg.graph.subgraph import Subgraph
from akg.target import get_target
from akg.tuner.task import TuningTask


def _relu():
    b = GraphBuilder("relu")
    b.output(b.relu(b.input("x", (64, 64))))
    return b.build()


def _winograd_output():
    b = GraphBuilder("wout")
    m = b.input("m", (4, 4, 8, 14, 16))
    b.output(b.relu(b.op("winograd_output", m, batch=1, out_hw=[28, 28], cols=16)))
    return b.build()


@pytest.mark.parametrize("graph, fusion", [(_relu, "smart"), (_winograd_output, "none")])
def test_the_task_default_is_the_build_default(graph, fusion):
    target = get_target("cpu")
    task = TuningTask(Subgraph(graph()), target)
    assert task.default_config().fusion == fusion
    assert build(graph(), target).config == task.default_config()
    assert task.default_config("smart").fusion == "smart"

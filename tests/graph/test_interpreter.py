"""Reference interpreter: evaluation, input binding and checks, random inputs."""

import numpy as np
import pytest

from akg.errors import InputDataError
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.interpreter import index_bounds


def _graph():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    idx = b.input("idx", (4,), "int32")
    table = b.const(np.arange(15, dtype=np.float32).reshape(5, 3), name="table")
    emb = b.gather(table, idx, name="emb")
    s = b.sum(b.relu(x), axes=[1], name="s")
    b.output(s, emb)
    return b.build()


def test_evaluates_by_name_and_position():
    g = _graph()
    x = np.array([[1, -2, 3], [-4, 5, 6]], np.float32)
    idx = np.array([4, 0, 0, 2], np.int32)
    s, emb = evaluate(g, {"x": x, "idx": idx})
    np.testing.assert_array_equal(s, [4, 11])
    np.testing.assert_array_equal(emb[:, 0], [12, 0, 0, 6])
    s2, _ = evaluate(g, [x, idx])
    np.testing.assert_array_equal(s, s2)
    everything = evaluate(g, [x, idx], keep_all=True)
    assert set(everything) >= {"x", "idx", "table", "emb", "s"}


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"x": np.zeros((2, 3), np.float32)}, "missing input"),
        ({"x": np.zeros((2, 3), np.float32), "idx": np.zeros(4, np.int32), "y": 1}, "unknown input"),
        ({"x": np.zeros((3, 2), np.float32), "idx": np.zeros(4, np.int32)}, r"%x must have shape \[2, 3\]"),
        ({"x": np.zeros((2, 3)), "idx": np.zeros(4, np.int32)}, "%x must be float32, got float64"),
        ({"x": np.zeros((2, 3), np.float32), "idx": np.full(4, 9, np.int32)}, "gather.*out of range"),
    ],
)
def test_bad_inputs_are_typed_errors(inputs, message):
    with pytest.raises(InputDataError, match=message):
        evaluate(_graph(), inputs)


def test_wrong_input_count_by_position():
    with pytest.raises(InputDataError, match="takes 2 inputs, got 1"):
        evaluate(_graph(), [np.zeros((2, 3), np.float32)])


def test_random_inputs_are_deterministic_nonzero_and_in_range():
    g = _graph()
    a, b = random_inputs(g, seed=3), random_inputs(g, seed=3)
    np.testing.assert_array_equal(a["x"], b["x"])
    assert np.count_nonzero(a["x"]) == a["x"].size
    assert a["idx"].dtype == np.int32 and a["idx"].min() >= 0 and a["idx"].max() < 5
    assert index_bounds(g) == {g.value("idx"): 5}
    assert not np.array_equal(random_inputs(g, seed=4)["x"], a["x"])
    evaluate(g, a)  # in range, so it runs

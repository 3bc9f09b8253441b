"""The linked call path (`Backend.link`, the CPU backend's TIR driver): a model call is one
packed call, bit-identical to calling the kernels one by one; packs run linked after
loading; inputs are passed without copies only where that is safe, and nothing returned
aliases an input, another output or memory a later call reuses."""

import dataclasses
import logging
import threading

import numpy as np
import pytest
from akg.graph import GraphBuilder, random_inputs
from akg.graph.io import load_mir

from akg.api import compile_model
from akg.errors import LoweringError
from akg.runtime import CompiledModel


def _per_kernel(model):
    return dataclasses.replace(model, use_driver=False)


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _aligned(a: np.ndarray, align: int = 64, offset: int = 0) -> np.ndarray:
    """A copy of `a` whose data starts `offset` bytes past an `align` boundary."""
    block = np.empty(a.nbytes + 2 * align, np.uint8)
    start = -block.ctypes.data % align + offset
    out = np.ndarray(a.shape, a.dtype, block, start)
    out[...] = a
    return out


@pytest.fixture(scope="module")
def examples(examples_dir):
    return {name: (load_mir(examples_dir / f"{name}.mir"),) for name in ("mlp", "resnet_block", "transformer_block")}


@pytest.mark.parametrize("name", ["mlp", "resnet_block", "transformer_block"])
def test_linked_examples_match_the_per_kernel_path_bit_for_bit(examples, name):
    graph = examples[name][0]
    model = compile_model(graph)
    assert model.driver() is not None  # the CPU backend links
    for seed in (0, 1):
        inputs = random_inputs(graph, seed)
        _same(model(**inputs), _per_kernel(model)(**inputs))


@pytest.mark.parametrize("name", ["add", "relu", "mlp", "lenet5", "resnet_block", "transformer_layer"])
def test_linked_mindir_fixtures_match_the_per_kernel_path(name, corpus):
    from akg.graph.io import load_model

    graph = load_model(corpus / "mindir" / f"{name}.mindir")
    with np.load(corpus / "mindir" / f"{name}.io.npz") as npz:
        data = {k: npz[k] for k in npz.files}
    inputs = {v.name: data[f"input_{i}"] for i, v in enumerate(graph.inputs)}
    model = compile_model(graph)
    assert model.driver() is not None
    _same(model(**inputs), _per_kernel(model)(**inputs))


def test_a_loaded_pack_runs_linked(tmp_path, examples):
    graph = examples["transformer_block"][0]
    model = compile_model(graph)
    inputs = random_inputs(graph, 2)
    want = _per_kernel(model)(**inputs)
    loaded = CompiledModel.load(model.save(tmp_path / "tb.akgpack"))
    _same(loaded(**inputs), want)
    assert loaded.driver() is not None
    again = CompiledModel.load(tmp_path / "tb.akgpack")  # a second copy in the same process
    _same(again(**inputs), want)
    _same(loaded(**inputs), want)


def _tricky_graph():
    """An output that is an input, an input read twice by one kernel, an output listed twice,
    a constant output, an intermediate that is also an output, a 0-d output and a 0-d
    intermediate."""
    b = GraphBuilder("tricky")
    x = b.input("x", (5, 7))
    y = b.input("y", (7, 3))
    c = b.const(np.arange(3, dtype=np.float32), name="c")
    sq = b.mul(x, x)
    h = b.matmul(sq, y)
    r = b.relu(b.add(h, c))
    total = b.sum(r)
    z = b.matmul(b.mul(x, b.sum(x)), y)
    b.output(x, r, c, h, r, total, y, z)
    return b.build()


def test_outputs_never_alias_inputs_each_other_or_a_later_call():
    graph = _tricky_graph()
    model = compile_model(graph)
    assert model.driver() is not None
    rng = np.random.default_rng(0)
    x = _aligned(rng.standard_normal((5, 7)).astype(np.float32))  # zero-copy candidates
    y = _aligned(rng.standard_normal((7, 3)).astype(np.float32))
    x0, y0 = x.copy(), y.copy()
    first = model(x, y)
    want = _per_kernel(model)(x0, y0)
    _same(first, want)
    np.testing.assert_array_equal(x, x0)  # inputs are not written
    np.testing.assert_array_equal(y, y0)
    for i, a in enumerate(first):
        assert not np.shares_memory(a, x) and not np.shares_memory(a, y)
        for b in first[i + 1:]:
            assert not np.shares_memory(a, b)
    kept = [a.copy() for a in first]
    second = model(-x, 2 * y)  # a second call must not touch what the first returned
    _same(first, kept)
    _same(second, _per_kernel(model)(-x0, 2 * y0))
    first[0][...] = 99  # and writing into a result changes nothing the model holds
    _same(model(x, y), want)


@pytest.mark.parametrize("layout", ["aligned", "misaligned", "strided", "readonly", "fortran"])
def test_inputs_of_any_layout_give_the_same_result(layout):
    graph = _tricky_graph()
    model = compile_model(graph)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    y = rng.standard_normal((7, 3)).astype(np.float32)
    want = _per_kernel(model)(x, y)
    if layout == "aligned":
        x, y = _aligned(x), _aligned(y)
    elif layout == "misaligned":
        x, y = _aligned(x, offset=4), _aligned(y, offset=16)
    elif layout == "strided":
        x = np.repeat(x, 2, axis=1)[:, ::2]
        assert not x.flags.c_contiguous
    elif layout == "readonly":
        x.flags.writeable = False
    else:
        x = np.asfortranarray(x)
    _same(model(x=x, y=y), want)


def test_aligned_contiguous_inputs_are_passed_without_a_copy():
    graph = _tricky_graph()
    model = compile_model(graph)
    driver = model.driver()
    seen = []
    real = driver._func
    driver._func = lambda *args: (seen.append(args), real(*args))[1]
    x = _aligned(np.ones((5, 7), np.float32))
    y = _aligned(np.ones((7, 3), np.float32), offset=8)  # not aligned: copied once
    model(x, y)
    args = seen[0]
    assert args[0] is x
    assert args[1] is not y and np.array_equal(args[1], y) and not np.shares_memory(args[1], y)


def test_many_calls_get_outputs_of_their_own_and_inputs_are_rechecked_as_they_change():
    # outputs come from arenas of blocks: a block is never handed out twice, across arenas too
    graph = _tricky_graph()
    model = compile_model(graph)
    x, y = _aligned(np.ones((5, 7), np.float32)), _aligned(np.ones((7, 3), np.float32))
    want = _per_kernel(model)(x.copy(), y.copy())
    calls = 3 * model.driver()._block.per_arena + 1
    results = [model(x, y) for _ in range(calls)]
    flat = [a for r in results for a in r]
    addresses = {a.ctypes.data for a in flat}
    assert len(addresses) == len(flat)
    for r in results:
        _same(r, want)
    x.flags.writeable = False  # the same array, now read-only: no longer passed as it is
    _same(model(x, y), want)


def test_copied_inputs_reuse_one_staging_block_per_thread():
    # a misaligned input is copied into the thread's staging block, the same memory every call
    # (it stays in cache); outputs never land there, and other threads stage their own copies
    graph = _tricky_graph()
    model = compile_model(graph)
    x, y = _aligned(np.ones((5, 7), np.float32), offset=4), _aligned(np.full((7, 3), 2.0, np.float32), offset=8)
    want = _per_kernel(model)(x.copy(), y.copy())
    driver = model.driver()
    _same(model(x, y), want)
    staged = [driver._staged(i).ctypes.data for i in range(2)]
    assert all(a % 64 == 0 for a in staged)
    results = [model(x, y) for _ in range(5)]
    assert [driver._staged(i).ctypes.data for i in range(2)] == staged
    for r in results:
        _same(r, want)
        assert not {a.ctypes.data for a in r} & set(staged)
    other = []
    thread = threading.Thread(target=lambda: other.append((model(x, y), driver._staged(0).ctypes.data)))
    thread.start()
    thread.join()
    _same(other[0][0], want)
    assert other[0][1] != staged[0]


def test_empty_inputs_and_outputs_are_accepted():
    """ONNX's CastLike cases pass an empty `like` tensor whose strides are 0 (as onnx's
    numpy_helper makes it), its empty-set reductions a (2, 0, 4) input: NumPy's strides of
    those are not what TVM checks a compact tensor against, and the driver refused them."""
    b = GraphBuilder("empty")
    x, like, none = b.input("x", (3, 4)), b.input("like", (0,)), b.input("none", (2, 0, 4))
    b.output(b.cast(x, to="float16"), b.relu(like), b.sum(none, axes=[1]), b.neg(none))
    model = compile_model(b.build())
    like = np.lib.stride_tricks.as_strided(_aligned(np.zeros(16, np.float32)), (0,), (0,))
    assert like.strides == (0,) and not like.ctypes.data % 64
    got = model(np.ones((3, 4), np.float32), like, _aligned(np.zeros((2, 0, 4), np.float32)))
    _same(got, [np.ones((3, 4), np.float16), np.zeros((0,), np.float32), np.zeros((2, 4), np.float32),
                np.zeros((2, 0, 4), np.float32)])


def test_concurrent_calls_do_not_share_intermediates(examples):
    graph = examples["mlp"][0]
    model = compile_model(graph)
    cases = [random_inputs(graph, s) for s in range(4)]
    want = [_per_kernel(model)(**c) for c in cases]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                _same(model(**cases[i]), want[i])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_backend_that_cannot_link_falls_back_to_the_per_kernel_path(monkeypatch, caplog, examples):
    graph = examples["mlp"][0]
    model = compile_model(graph)
    inputs = random_inputs(graph, 0)
    want = _per_kernel(model)(**inputs)

    def fail(self, executables, program):
        raise LoweringError("no driver today")

    monkeypatch.setattr(type(model.backend), "link", fail)
    with caplog.at_level(logging.WARNING, logger="akg.runtime"):
        _same(model(**inputs), want)
    assert model.driver() is None and "no driver today" in caplog.text
    _same(model(**inputs), want)


def test_link_program_numbers_tensors_by_the_memory_plan(examples):
    graph = examples["transformer_block"][0]
    model = compile_model(graph)
    keys = list(model.kernels)
    program, outputs = model.link_program({k: i for i, k in enumerate(keys)})
    assert outputs == [s.name for s in model.outputs]
    assert len(program.calls) == len(model.calls)
    assert program.workspace_bytes >= model.plan.peak_bytes
    assert all(offset % program.alignment == 0 for _, _, offset in program.temps)
    n_in, n_w = len(program.inputs), len(program.weights)
    for k, args in program.calls:
        assert 0 <= k < len(keys)
        assert all(0 <= a < n_in + n_w + len(program.outputs) + len(program.temps) for a in args)
    assert program.tensor(n_in) == ("weight", 0)

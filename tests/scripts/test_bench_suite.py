"""The kernel benchmarks' suite (scripts/bench/kernels.py, suite.py): the NumPy function a
benchmark times as its NumPy baseline computes what the benchmark's graph computes, and the
tuning benchmark's summary states the issue's checks (stream fraction, tuned against default)."""

import numpy as np
import pytest

from akg.target import STREAM, get_target
from akg.verify import Reference


@pytest.fixture(scope="module")
def kernels(bench_module):
    return bench_module("kernels")


@pytest.fixture(scope="module")
def tuning(bench_module):
    return bench_module("tuning")


MEMORY_BOUND = ("softmax", "layer_norm", "bias_gelu", "reduce_sum", "rms_norm", "layer_norm_backward")


def test_the_suite_has_the_multi_pass_reductions(kernels):
    names = [b.name for b in kernels.suite_benches()]
    assert set(MEMORY_BOUND) <= set(names)


@pytest.mark.parametrize("name", MEMORY_BOUND)
def test_numpy_baseline_computes_the_graph(kernels, bench_module, name):
    suite = bench_module("suite")
    bench = next(b for b in kernels.suite_benches() if b.name == name)
    program, ins, outs = kernels.arrays_for(bench.graph)
    fn = getattr(suite, bench.numpy_fn.rsplit(":", 1)[1])
    got = fn(ins)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    graph_inputs = dict(zip([t.name for t in program.inputs], ins))
    expected = Reference.of(bench.graph, graph_inputs).exact
    assert len(got) == len(expected) == len(outs)
    for g, e, o in zip(got, expected, outs):
        assert np.shape(g) == e.shape == o.shape
        scale = max(1.0, float(np.max(np.abs(e))))
        np.testing.assert_allclose(np.asarray(g, np.float64), e, rtol=1e-3, atol=1e-4 * scale)


def _row(name, default, tuned, floor=None, floor_bytes=32 << 20, nbytes=32 << 20, ms=None, error=None):
    return {"name": name, "budget": 64, "akg_default_s": default, "akg_s": tuned, "ms_s": ms,
            "stream_floor_s": floor, "floor_bytes": floor_bytes, "bytes": nbytes, "ms_error": error,
            "numpy_s": None, "akg_tune_s": 1.0, "akg_trials": 64, "ms_tune_s": 1.0, "ms_trials": 64,
            "akg_reach95": 1, "ms_reach95": 1, "akg_second_run_new": 0}


def test_summary_states_the_stream_fraction_and_slower_tuned_rows(tuning):
    rows = [_row("layer_norm", 1.0e-3, 0.5e-3, floor=0.45e-3, ms=1.0e-3),  # 90% of the floor
            _row("softmax", 1.0e-3, 1.0e-3, floor=0.45e-3, ms=2.0e-3),  # 45%
            _row("layer_norm_backward", 1.0e-3, 1.2e-3, floor=0.5e-3, nbytes=48 << 20, error="ScheduleError: x")]
    assert tuning.stream_fraction(rows[0]) == pytest.approx(0.9)
    assert tuning.stream_fraction(rows[2]) == pytest.approx(0.625)
    text = tuning.summary(rows)
    assert "layer_norm @ 64: tuned at 90% of the stream floor's bandwidth, default at 45% (>= 80%: met)" in text
    assert "softmax @ 64: tuned at 45%" in text and "NOT met" in text
    assert "tuned slower than default beyond 3%: layer_norm_backward @ 64 (0.83x)" in text
    assert "MetaSchedule failed at 64 trials on layer_norm_backward" in text
    assert "2.00x over 2 kernels" in text  # the geometric mean leaves the failed row out
    table = tuning.table(rows)
    assert "| failed |" in table and "90% (45%)" in table


def test_a_tuned_row_with_the_default_config_is_no_slower_tuned_row(tuning):
    # the same config built twice times a few percent apart: not a tuned kernel slower than
    # the default; a workload tuned as several kernels says so
    same = _row("conv2d", 1.0e-3, 1.0e-3, ms=1.5e-3)
    same.update(akg_same_config=True, akg_tuned_kernels=1)
    apart = _row("layer_norm_backward", 1.0e-3, 1.0e-3)
    apart.update(akg_same_config=True, akg_tuned_kernels=2)
    slower = _row("softmax", 1.0e-3, 1.1e-3)
    slower.update(akg_same_config=False, akg_tuned_kernels=1)
    text = tuning.summary([same, apart, slower])
    assert "tuned slower than default beyond 3%: softmax @ 64 (0.91x)" in text
    assert "tuned as several kernels (akg compile's), timed as akg.build's one kernel with its default config: " \
           "layer_norm_backward @ 64 (2 kernels)" in text
    table = tuning.table([same, apart])
    assert "1.000 ms (default config) |" in table
    assert "(default config: tuned as 2 kernels, not this one)" in table


@pytest.mark.parametrize("message", ["ScheduleError: ...\nError message: The primitive requires", ""])
def test_a_metaschedule_failure_becomes_a_row_not_a_crash(tuning, monkeypatch, message):
    def fail(*args, **kwargs):
        raise RuntimeError(message)

    monkeypatch.setattr(tuning, "to_te", lambda program: program)
    monkeypatch.setattr(tuning.peers, "tune_metaschedule", fail)
    monkeypatch.setattr(tuning.peers, "stop_popen_workers", lambda *owners: None)
    row, modules = tuning.ms_side(None, 64, "unused", None, None)
    assert modules == {} and row["ms_trials"] == 0
    assert row["ms_error"].startswith("RuntimeError: ")
    assert ("The primitive requires" in row["ms_error"]) == bool(message)


@pytest.mark.parametrize("name", ["layer_norm", "layer_norm_backward"])
def test_the_stream_floor_moves_the_workload_s_bytes(kernels, tuning, name):
    # a floor over fewer bytes than the kernel moves could sit in a cache the kernel overflows
    bench = next(b for b in kernels.suite_benches() if b.name == name)
    _, ins, outs = kernels.arrays_for(bench.graph)
    modules, arrays = tuning.stream_floor(bench, ins, outs)
    assert len(arrays) == 2 and arrays[0].shape == arrays[1].shape
    assert len(modules) == (2 if get_target("cpu").has(STREAM) else 1)  # both store kinds where there are two
    want = sum(a.nbytes for a in (*ins, *outs))
    assert abs(sum(a.nbytes for a in arrays) - want) <= 2 * arrays[0].shape[-1] * arrays[0].itemsize


def test_the_floor_is_the_faster_store_kind(tuning, monkeypatch):
    times = {"akg_default_s": 2.0, "stream_floor_s": 1.5, "stream_floor_s_1": 1.0}
    monkeypatch.setattr(tuning, "time_modules_interleaved", lambda calls, **kw: {k: times[k] for k in calls})
    out = tuning.final_times({"akg_default_s": object()}, [], [], ([object(), object()], []))
    assert out == {"akg_default_s": 2.0, "stream_floor_s": 1.0}
    assert tuning.final_times({"akg_default_s": object()}, [], [], ([], [])) == {"akg_default_s": 2.0}

"""The pieces of scripts/bench/parallel_measured.py (gloo runs against the cost model): the
alpha/beta fit, the calibrated kernel times, the hand plans, the ranking and the table. The
calibration with spawned processes is slow."""

import importlib
import math
import sys
from pathlib import Path

import pytest

BENCH = str(Path(__file__).resolve().parents[2] / "scripts" / "bench")


@pytest.fixture(scope="module")
def pm():
    """The script imported by its own name (spawned calibration ranks import it again); its
    folder is appended to the path, after everything else, so that it shadows nothing."""
    if BENCH not in sys.path:
        sys.path.append(BENCH)
    return importlib.import_module("parallel_measured")


def test_fit_recovers_alpha_and_beta(pm):
    alpha, beta = 300e-6, 1 / 1e9
    samples = [(k, b, alpha + beta * 2 * (k - 1) / k * b) for k in (2, 4) for b in (4, 4096, 1 << 20, 4 << 20)]
    a, b, err = pm.fit_alpha_beta(samples)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6) and err < 1e-6


def test_ring_fit_and_gloo_prices(pm):
    hop, beta = 100e-6, 1 / 1e9
    samples = [(k, b, pm.runner_collective("all_reduce", b, k, hop, beta)) for k in (2, 4) for b in (4, 1 << 20)]
    a, b, err = pm.fit_hops(samples)
    assert a == pytest.approx(hop, rel=1e-6) and b == pytest.approx(beta, rel=1e-6) and err < 1e-6
    assert samples[2][2] > 2.9 * samples[0][2]  # 4 ranks: three times the messages of 2
    # gloo has no reduce-scatter or all-to-all: an all-reduce of the whole, an all-gather of all
    B = 1 << 20
    assert pm.runner_collective("reduce_scatter", B, 4, hop, beta) == pm.runner_collective("all_reduce", B, 4, hop, beta)
    assert pm.runner_collective("all_to_all", B, 4, hop, beta) == pm.runner_collective("all_gather", 4 * B, 4, hop, beta)
    assert pm.runner_collective("all_reduce", B, 1, hop, beta) == 0.0


def test_fit_stays_positive_on_noise(pm):
    a, b, err = pm.fit_alpha_beta([(2, 4, 5e-4), (2, 4096, 3e-4), (2, 1 << 20, 2e-4)])  # falling: no beta
    assert a > 0 and b > 0 and math.isfinite(err)


def test_kernel_rates_are_sane(pm):
    flops, bw, call = pm._kernel_rates(window_s=0.05)
    assert [w for w, _ in flops] == [2 * m * k * n for m, k, n in pm.MATMULS]
    assert [w for w, _ in bw] == [12 * n for n in pm.ADDS]
    assert all(1e8 < r < 1e13 for _, r in flops) and all(1e7 < r < 1e12 for _, r in bw) and 0 < call < 0.01
    cal = pm.Calibration(1, 1, flops[-1][1], bw[-1][1], call, 1e-4, 1e-9, flops_curve=flops, bandwidth_curve=bw)
    assert cal.rate(bw, 12 * pm.ADDS[0], 1.0) == pytest.approx(bw[0][1])  # at a measured point: its rate
    assert cal.rate(bw, 1, 1.0) == pytest.approx(bw[0][1]) and cal.rate([], 5, 7.0) == 7.0  # ends held


def _cal(pm, n=2):
    return pm.Calibration(n, 1, 20e9, 5e9, 20e-6, 300e-6, 1 / 1e9)


def test_calibrated_kernels_add_a_call_per_kernel(pm):
    from akg.graph.ops import get_op
    from akg.graph.parallel.strategy import OpCall
    from akg.graph.types import TensorType

    t = TensorType((64, 64), "float32")
    mm = OpCall("matmul", (t, t), (t,), get_op("matmul").check_attrs({}))
    add = OpCall("add", (t, t), (t,), get_op("add").check_attrs({}))
    cal = _cal(pm)
    with_call, roof = pm.CalibratedKernels(cal), pm.CalibratedKernels(cal, per_call=False)
    assert with_call.time(mm) == pytest.approx(roof.time(mm) + cal.call_s)
    assert with_call.time(add) == roof.time(add) > 0  # elementwise: fused, no call of its own
    assert roof.time(mm) == pytest.approx(max(2 * 64 ** 3 / 20e9, 3 * 64 * 64 * 4 / 5e9))


def test_hand_plans_are_distinct_and_priced(pm):
    from akg.graph.parallel.cost import evaluate

    (model, step, pins_of, cut), = pm.models(["mlp"]).values()
    cal = _cal(pm, 4)
    texts = {}
    cal.alpha_hop, cal.beta_hop = cal.alpha / 2, cal.beta  # a ring of 2: the flat fit's alpha
    for label, plan in pm.hand_plans(step, 4, pins_of, cut):
        texts[pm.program_text(step, plan)] = label
        p = evaluate(step, plan, cal.cluster(), pm.CalibratedKernels(cal))
        assert p.step_time > 0 and p.compute > 0, label
        runner = pm.evaluate_runner(step, plan, cal.cluster(), pm.CalibratedKernels(cal), cal.alpha_hop, cal.beta_hop)
        if plan.stages is None:  # groups of 4 and gloo's stand-ins cost more, never less (a send: one hop)
            assert runner >= p.step_time * (1 - 1e-9), label
    assert len(texts) == 4  # dp=4, tp=4, dp=2,tp=2, dp=2,pp=2
    assert cal.cluster().devices_per_node == 4 and cal.cluster().intra_alpha == cal.cluster().inter_alpha


def test_ranking_and_table(pm):
    rows = [{"model": "m", "processes": 2, "plan": p, "measured_s": ms, "q25_s": ms - 0.5e-3, "q75_s": ms + 0.5e-3,
             "predicted_s": pr, "compute_s": pr / 2, "comm_s": pr / 2, "kernels_s": pr, "kernels_compute_s": pr, "runner_s": pr, "collectives": {"all_reduce": 2}}
            for p, ms, pr in [("a", 10e-3, 2e-3), ("b", 5e-3, 1e-3), ("c", 5.2e-3, 1.5e-3)]]
    r = pm.ranking(rows)
    assert r["measured_order"] == ["b", "c", "a"] and r["predicted_order"] == ["b", "c", "a"]
    assert r["tau"] == 1.0 and r["agrees"]
    rows[2]["predicted_s"] = 0.5e-3  # c now predicted fastest: flips with b (within noise), not with a
    r = pm.ranking(rows)
    assert r["flipped"] == [("b", "c", True)] and not r["agrees"] and r["agrees_beyond_noise"]
    assert pm.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    text = pm.table(rows)
    assert text.count("\n") == 4 and "| m | 2 | a | 2.00 (1.00 + 1.00) | 10.0 (9.5-10.5) | 5.00 | 2.00 (2.00) | 5.00 | 2.00 | 5.00 |" in text and "all_reduce x2" in text
    assert any("flipped: b vs c (within noise)" in line for line in pm.rank_lines(rows))


def test_measured_kernels_time_an_op_once(pm):
    from akg.graph.ops import get_op
    from akg.graph.parallel.strategy import OpCall
    from akg.graph.types import TensorType

    t = TensorType((32, 64), "float32")
    mm = OpCall("matmul", (t, TensorType((64, 16), "float32")), (TensorType((32, 16), "float32"),),
                get_op("matmul").check_attrs({}))
    k = pm.MeasuredKernels(slowdown=2.0, window_s=0.005)
    first = k.time(mm)
    assert 0 < first < 0.1 and k.time(mm) == first and len(k.cache) == 1 and first == 2.0 * k.cache[mm]
    cal = pm.Calibration(2, 1, 1e9, 1e9, 1e-5, 1e-4, 1e-9, flops_curve=[(1, 5e9)], bandwidth_curve=[(1, 2e9)])
    assert pm.slowdown(([(1, 10e9)], [(1, 8e9)]), cal) == pytest.approx(math.sqrt(2 * 4))


@pytest.mark.slow
def test_calibration_with_two_processes(pm):
    cal = pm.calibrate(2, reps=5)
    assert cal.processes == 2 and cal.flops > 1e8 and cal.bandwidth > 1e7 and 0 < cal.call_s < 0.01
    assert 0 < cal.alpha < 0.1 and 0 < cal.beta < 1e-6  # under 0.1 s per message, over 1 MB/s
    assert len(cal.samples) == len(pm.SIZES) and "calibrated" in cal.cluster().note

"""The pieces of scripts/bench/parallel_measured.py (gloo runs against the cost model): the
alpha/beta fit, the calibrated kernel times, the hand plans, the ranking and the table. The
calibration with spawned processes is slow."""

import math

import pytest


@pytest.fixture(scope="module")
def pm(bench_module):
    """The script imported by its own name (spawned calibration ranks import it again)."""
    return bench_module("parallel_measured")


def test_latency_fits(pm):
    """The fits recover a call's latency, the latency per ring message and beta from
    all-reduces priced as the cost model prices gloo's, a send's latency from ping-pongs, and
    stay non-negative on noise."""
    from akg.graph.parallel.cost import collective_time

    c = _cal(pm, 4, alpha=1e-3, hop=100e-6, beta=1 / 1e9).cluster()
    samples = [(k, b, collective_time("all_reduce", b, k, c, True)) for k in (2, 4) for b in (4, 1 << 20)]
    a, h, b, err = pm.fit_latency(samples)
    assert (a, h, b) == pytest.approx((1e-3, 100e-6, 1e-9), rel=1e-6) and err < 1e-6
    a, h, b, err = pm.fit_latency([(2, 4, 5e-4), (2, 4096, 3e-4), (2, 1 << 20, 2e-4)])  # falling: no beta
    assert a >= 0 and h >= 0 and b > 0 and math.isfinite(err)
    assert pm.fit_p2p([(4, 60e-6 + 4e-9), (1 << 20, 60e-6 + (1 << 20) * 1e-9)]) == pytest.approx(60e-6)


def test_kernel_rates_are_sane(pm):
    flops, bw, call = pm._kernel_rates(window_s=0.05)
    assert [w for w, _ in flops] == [2 * m * k * n for m, k, n in pm.MATMULS]
    assert [w for w, _ in bw] == [12 * n for n in pm.ADDS]
    assert all(1e8 < r < 1e13 for _, r in flops) and all(1e7 < r < 1e12 for _, r in bw) and 0 < call < 0.01
    c = pm.Calibration(1, 1, flops[-1][1], bw[-1][1], call, 1e-4, 1e-5, 1e-9, 3e-5, flops_curve=flops,
                       bandwidth_curve=bw).cluster()
    assert c.byte_rate(12 * pm.ADDS[0]) == pytest.approx(bw[0][1])  # at a measured point: its rate
    assert c.byte_rate(1) == pytest.approx(bw[0][1]) and c.flop_rate(1e15) == pytest.approx(flops[-1][1])  # ends held


def _cal(pm, n=2, alpha=500e-6, hop=150e-6, beta=1 / 1e9):
    return pm.Calibration(n, 1, 20e9, 5e9, 20e-6, alpha, hop, beta, 60e-6)


def test_the_calibrated_cluster_is_gloo(pm):
    """The calibration becomes a ClusterSpec the cost model prices as gloo runs collectives,
    with the measured per-message and send latencies and the cost of a call."""
    c = _cal(pm, 4).cluster()
    assert c.library == "gloo" and c.intra_alpha == c.inter_alpha == 500e-6 and c.message_alpha == 150e-6
    assert c.p2p_alpha == 60e-6
    assert c.call_s == 20e-6 and c.devices_per_node == 4 and "calibrated" in c.note


def test_hand_plans_are_distinct_and_priced(pm):
    from akg.graph.parallel.cost import evaluate

    (model, step, pins_of, cut), = pm.models(["mlp"]).values()
    cal = _cal(pm, 4)
    texts = {}
    for label, plan in pm.hand_plans(step, 4, pins_of, cut):
        texts[pm.program_text(step, plan)] = label
        p = evaluate(step, plan, cal.cluster())
        assert p.step_time > 0 and p.compute > 0, label
        assert p.communication > 0, label  # every hand plan of 4 ranks exchanges something
    assert len(texts) == 4  # dp=4, tp=4, dp=2,tp=2, dp=2,pp=2


def test_ranking_and_table(pm):
    rows = [{"model": "m", "processes": 2, "plan": p, "measured_s": ms, "q25_s": ms - 0.5e-3, "q75_s": ms + 0.5e-3,
             "predicted_s": pr, "compute_s": pr / 2, "comm_s": pr / 2, "kernels_s": pr, "kernels_compute_s": pr,
             "collectives": {"all_reduce": 2}}
            for p, ms, pr in [("a", 10e-3, 2e-3), ("b", 5e-3, 1e-3), ("c", 5.2e-3, 1.5e-3)]]
    r = pm.ranking(rows)
    assert r["measured_order"] == ["b", "c", "a"] and r["predicted_order"] == ["b", "c", "a"]
    assert r["tau"] == 1.0 and r["agrees"]
    rows[2]["predicted_s"] = 0.5e-3  # c now predicted fastest: flips with b (within noise), not with a
    r = pm.ranking(rows)
    assert r["flipped"] == [("b", "c", True)] and not r["agrees"] and r["agrees_beyond_noise"]
    assert pm.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    text = pm.table(rows)
    assert text.count("\n") == 4 and "| m | 2 | a | 2.00 (1.00 + 1.00) | 10.0 (9.5-10.5) | 5.00 | 2.00 (2.00) | 5.00 | all_reduce x2 |" in text and "all_reduce x2" in text
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
    add = OpCall("add", (t, t), (t,), get_op("add").check_attrs({}))
    assert k.time(add) is None and len(k.cache) == 1  # fused: the model's roofline prices it
    cal = pm.Calibration(2, 1, 1e9, 1e9, 1e-5, 1e-4, 1e-5, 1e-9, 3e-5, flops_curve=[(1, 5e9)],
                         bandwidth_curve=[(1, 2e9)])
    assert pm.slowdown(([(1, 10e9)], [(1, 8e9)]), cal) == pytest.approx(math.sqrt(2 * 4))


@pytest.mark.slow
def test_calibration_with_two_processes(pm):
    cal = pm.calibrate(2, reps=5)
    assert cal.processes == 2 and cal.flops > 1e8 and cal.bandwidth > 1e7 and 0 < cal.call_s < 0.01
    assert 0 <= cal.alpha < 0.1 and 0 <= cal.alpha_hop < 0.1 and 0 < cal.beta < 1e-6  # < 0.1 s a message, > 1 MB/s
    assert 0 < cal.p2p_alpha < 0.1 and len(cal.p2p_samples) == len(pm.P2P_SIZES)
    assert len(cal.samples) == len(pm.SIZES) and "calibrated" in cal.cluster().note

"""The benchmarks' alternating rounds (scripts/bench/timing.py): a contender's time is its best
round, and a slow spell over the first rounds does not become the result."""

import pytest


@pytest.fixture(scope="module")
def timing(load_script):
    return load_script("bench/timing")


def _host(spell_rounds: int, slow: dict):
    """run_round for a host whose first `spell_rounds` rounds slow each contender by slow[name]."""
    calls = {}

    def run_round(name):
        calls[name] = calls.get(name, 0) + 1
        base = {"akg": 1.0, "peer": 1.2}[name]
        return base * (slow.get(name, 1.0) if calls[name] <= spell_rounds else 1.0)

    return run_round, calls


def test_a_quiet_host_takes_the_minimum_rounds(timing):
    run_round, calls = _host(0, {})
    best, done = timing.best_rounds(["akg", "peer"], run_round, rounds=9)
    assert done == 9 and calls == {"akg": 9, "peer": 9}
    assert best == {"akg": 1.0, "peer": 1.2}


class _Probe:
    """A HostProbe whose kernel ran at 1.0 before and runs `slow` times slower for `spell` rounds."""

    names = ("stream",)

    def __init__(self, spell: int, slow: float = 2.0):
        self.bests, self.calls, self.spell, self.slow = {"stream": 1.0}, 0, spell, slow

    def run(self, name):
        self.calls += 1
        seconds = self.slow if self.calls <= self.spell else 1.0
        self.bests[name] = min(self.bests[name], seconds)
        return seconds


def test_a_spell_the_probe_sees_is_outlasted(timing):
    # a bandwidth spell over 12 rounds slows akg's memory-bound kernels and not the peer: the
    # bests settle inside it, the probe tells
    run_round, calls = _host(12, {"akg": 1.8})
    probe, report = _Probe(12), {}
    best, done = timing.best_rounds(["akg", "peer"], run_round, rounds=9, probe=probe, report=report)
    assert best == {"akg": 1.0, "peer": 1.2}
    assert done == 12 + 1 + timing.SETTLE  # the round that improved, then SETTLE quiet ones
    assert calls["akg"] == calls["peer"] == probe.calls == done  # everyone runs in every round
    assert report == {"rounds": done, "host": {"stream": 1.0}}


def test_without_a_probe_a_spell_that_outlasts_the_minimum_is_measured(timing):
    run_round, _ = _host(12, {"akg": 1.8})
    best, done = timing.best_rounds(["akg", "peer"], run_round, rounds=9)
    assert done == 9 and best["akg"] == pytest.approx(1.8)


def test_a_late_better_round_prolongs_the_timing(timing):
    run_round, _ = _host(7, {"akg": 1.5})  # akg improves in round 8
    best, done = timing.best_rounds(["akg", "peer"], run_round, rounds=9)
    assert best["akg"] == 1.0 and done == 8 + timing.SETTLE


def test_a_spell_longer_than_the_limit_is_what_is_measured_and_reported(timing):
    run_round, _ = _host(100, {"akg": 1.8})
    report = {}
    best, done = timing.best_rounds(["akg", "peer"], run_round, rounds=3, max_rounds=7, probe=_Probe(100),
                                    report=report)
    assert done == 7 and best["akg"] == pytest.approx(1.8)
    assert report["host"] == {"stream": 2.0}


def test_gains_within_the_tolerance_do_not_prolong_the_timing(timing):
    times = iter([1.0] + [1.0 - 0.001 * i for i in range(1, 100)])
    best, done = timing.best_rounds(["akg"], lambda name: next(times), rounds=5)
    assert done == 5 and best["akg"] == pytest.approx(0.996)


def test_the_host_probe_times_its_kernels_and_keeps_their_bests(timing):
    probe = timing.HostProbe()
    for name in probe.names:
        first, second = probe.run(name), probe.run(name)
        assert 0 < probe.bests[name] == min(first, second) < 1

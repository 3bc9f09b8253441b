"""Timing in alternating rounds, for benchmarks on a shared host: every contender runs in
every round, and each reports its best round (interference only ever adds time).

This VM shares its host, and slow spells come and go: seconds to a minute in which one vCPU
runs at half speed or the memory bandwidth a copy reaches drops from ~80 to ~30 GB/s
(docs/performance.md, 2026-12-06). A spell does not slow every contender alike (a kernel that
streams through L3 suffers more than one that stays in L2), so a fixed number of rounds that
falls inside one measures the spell. Rounds therefore go on past `rounds` while any
contender still improves its best round by more than `TOLERANCE` within the last `SETTLE`
rounds, up to `max_rounds`; every contender runs in every round, so the extra rounds favour
none of them. A spell that lasts the whole timing looks settled, so a `HostProbe` runs in the
rounds too: two fixed kernels (a DRAM stream and a compute loop on every thread) whose best
round in this timing is compared with their best in the whole process; while one of them is
more than SPELL slower, the rounds go on (up to `max_rounds`), and the ratio is reported."""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from pathlib import Path

SETTLE = 4        # rounds without a better best (beyond TOLERANCE) that end the timing
TOLERANCE = 0.03  # a best round this much faster than the previous best counts as better
SPELL = 1.25      # a probe kernel this much slower than its best in the process: a slow spell


class HostProbe:
    """Two kernels whose time shows the host's state: `stream` reads and writes 32 MiB each
    (DRAM bandwidth), `compute` runs a multiply-add loop in L1 on every pool thread (a vCPU
    that is slow or preempted holds back the whole parallel kernel). `run(name)` times one
    round; `bests` keeps each kernel's best round in this process."""

    names = ("stream", "compute")
    PAUSE = 0.02  # seconds before each round

    def __init__(self):
        import numpy as np
        import tvm

        spec = importlib.util.spec_from_file_location("host_probe_kernels",
                                                      Path(__file__).with_name("host_probe_kernels.py"))
        kernels = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(kernels)
        dev = tvm.cpu()
        target = tvm.target.Target({"kind": "llvm"})
        self._timers = {}
        for name, (func, shapes) in {"stream": kernels.stream_kernel(), "compute": kernels.compute_kernel()}.items():
            module = tvm.compile(tvm.IRModule({"main": func}), target).mod
            args = [tvm.runtime.tensor(np.ones(shape, "float32"), dev) for shape in shapes]
            module["main"](*args)
            self._timers[name] = (module, module.time_evaluator("main", dev, number=3, repeat=1), args)
        self.bests = {name: math.inf for name in self.names}

    def run(self, name: str) -> float:
        """One round of kernel `name`: after a pause that lets the threads of whoever ran before
        go to sleep (ONNX Runtime's and OpenMP's spin after their calls, and would be timed as
        a slow host), one untimed call that wakes the pool's own, then `number` timed calls."""
        module, timer, args = self._timers[name]
        time.sleep(self.PAUSE)
        module["main"](*args)
        seconds = float(timer(*args).mean)
        self.bests[name] = min(self.bests[name], seconds)
        return seconds


def best_rounds(names, run_round, rounds: int = 9, max_rounds: int | None = None,
                probe: HostProbe | None = None, report: dict | None = None) -> tuple[dict, int]:
    """The best of `run_round(name)` (seconds) per name over alternating rounds: at least
    `rounds`, then more until no name's best improved by more than TOLERANCE in the last SETTLE
    rounds and (with a `probe`) the host is out of a slow spell, at most `max_rounds` (default
    3 x rounds). Returns the bests and the rounds run; `report` (a dict) gets `rounds` and,
    with a probe, `host`: each probe kernel's best round here over its best in the process."""
    max_rounds = max(rounds, max_rounds if max_rounds is not None else 3 * rounds)
    best = {name: math.inf for name in names}
    here = {name: math.inf for name in (probe.names if probe else ())}
    quiet = 0  # rounds since some best last improved by more than TOLERANCE
    done = 0

    def spell() -> bool:
        return any(here[name] > SPELL * probe.bests[name] for name in here)

    while done < max_rounds:
        improved = False
        for name in names:
            seconds = run_round(name)
            if seconds < best[name] * (1 - TOLERANCE):
                improved = True
            best[name] = min(best[name], seconds)
        for name in here:
            here[name] = min(here[name], probe.run(name))
        done += 1
        quiet = 0 if improved else quiet + 1
        if done >= rounds and quiet >= SETTLE and not (probe and spell()):
            break
    if report is not None:
        report["rounds"] = done
        if probe:
            report["host"] = {name: here[name] / probe.bests[name] for name in here}
    return best, done


def timeit_interleaved(fns: dict, rounds: int = 9, seconds: float = 0.25, max_rounds: int | None = None,
                       probe: HostProbe | None = None, report: dict | None = None) -> dict:
    """Seconds per call of each function, timed in alternating rounds (each round runs every
    contender for `seconds` and takes the median call): a contender's time is its best round
    (`best_rounds`: `rounds` or more, until the bests settle). The number of rounds run goes
    to `report["rounds"]` where a dict is given (and the `probe`'s verdict: `best_rounds`)."""
    for fn in fns.values():
        fn()

    def run_round(name):
        fn, samples, start = fns[name], [], time.perf_counter()
        while time.perf_counter() - start < seconds or len(samples) < 3:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    return best_rounds(list(fns), run_round, rounds, max_rounds, probe, report)[0]


def time_modules_interleaved(calls: dict, rounds: int = 9, seconds: float = 0.2,
                             func_name: str = "main", max_rounds: int | None = None,
                             probe: HostProbe | None = None, report: dict | None = None) -> dict:
    """Seconds per call of compiled modules, timed in alternating rounds like
    `timeit_interleaved`, but each round is one `time_evaluator` run (TVM's own loop, no
    Python call in the timed region; a 10-microsecond kernel is not timed as its call
    overhead). `calls`: label -> (module, args). A module's time is the mean call of its best
    round; each round's call count is set from one warm call to last about `seconds`."""
    import tvm

    dev = tvm.cpu()
    evaluators = {}
    for label, (mod, args) in calls.items():
        mod[func_name](*args)
        t0 = time.perf_counter()
        mod[func_name](*args)
        number = max(1, int(seconds / max(time.perf_counter() - t0, 1e-6)))
        evaluators[label] = (mod.time_evaluator(func_name, dev, number=number, repeat=1), args)

    def run_round(label):
        evaluate, args = evaluators[label]
        return float(evaluate(*args).mean)

    return best_rounds(list(calls), run_round, rounds, max_rounds, probe, report)[0]

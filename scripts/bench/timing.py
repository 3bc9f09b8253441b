"""Timing in alternating rounds, for benchmarks on a shared host: every contender runs in
every round, and each reports its best round (interference only ever adds time)."""

from __future__ import annotations

import math
import statistics
import time


def timeit_interleaved(fns: dict, rounds: int = 9, seconds: float = 0.25) -> dict:
    """Seconds per call of each function, timed in alternating rounds (each round runs every
    contender for `seconds` and takes the median call): a contender's time is its best
    round. This VM shares its host, and slow spells of a few seconds come and go; rounds put
    every contender into the quiet spells, and the best round is what each runs at when the
    machine is quiet (interference only ever adds time)."""
    rounds_of: dict = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            samples, start = [], time.perf_counter()
            while time.perf_counter() - start < seconds or len(samples) < 3:
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
            rounds_of[name].append(statistics.median(samples))
    return {name: min(r) for name, r in rounds_of.items()}


def time_modules_interleaved(calls: dict, rounds: int = 9, seconds: float = 0.2,
                             func_name: str = "main") -> dict:
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
    best = {label: math.inf for label in calls}
    for _ in range(rounds):
        for label, (evaluate, args) in evaluators.items():
            best[label] = min(best[label], float(evaluate(*args).mean))
    return best

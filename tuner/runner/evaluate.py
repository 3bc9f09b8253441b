"""Running one built candidate (in a runner worker, or in the tuner's process): load the
artifact through its backend, run it once and verify the outputs against the reference, then
time it with the backend's `measure` (a candidate whose verification run alone is far slower
than the best is recorded with that one time). `compare_artifacts`: the final comparison of
several candidates, timed in alternating rounds in one process; where the operands beyond
the first are large (a layer's weights), as they come in a model: from memory."""

from __future__ import annotations

import io
import statistics
import time
from dataclasses import dataclass

import numpy as np

from akg.db.record import Status
from akg.target import Artifact, get_backend
from akg.tuner.runner.runner import DEFAULT_MIN_SECONDS, DEFAULT_REPEATS, SLOWDOWN_LIMIT

# Operands beyond the first (a layer's weights, after its input) of more than this many bytes
# come from memory in a model: every other kernel has gone through the caches since the last
# call. The final comparison then times each call on one of several copies of them, enough to
# cover more than the last-level cache, so that a config that only wins with its weights in
# cache does not displace one that streams them well (ResNet-18 tuned on warm timings ran 5%
# slower than its default configs in the model)
COLD_BYTES = 1 << 20
ROTATE_BYTES = 96 << 20
MAX_COPIES = 24


@dataclass
class TaskArrays:
    """A task's payload, loaded: output names, kernel arguments (inputs then parameters) and
    the reference outputs in declared precision and float64."""

    names: list[str]
    args: list[np.ndarray]
    reference: list[np.ndarray]
    exact: list[np.ndarray]
    narrowest: list[str] | None = None  # `akg.verify.Reference.narrowest`

    def expected(self):
        from akg.verify import Reference

        return Reference(self.reference, self.exact, self.narrowest)


def load_task(payload: bytes) -> TaskArrays:
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        data = {k: npz[k] for k in npz.files}
    names = [str(n) for n in data.pop("names")]
    narrowest = [str(n) for n in data.pop("narrowest")] if "narrowest" in data else None
    ins = [data[f"in{k}"] for k in range(sum(1 for n in data if n.startswith("in")))]
    params = [data[f"param{k}"] for k in range(sum(1 for n in data if n.startswith("param")))]
    ref = [data[f"ref{k}"] for k in range(len(names))]
    exact = [data[f"exact{k}"] for k in range(len(names))]
    return TaskArrays(names, ins + params, ref, exact, narrowest)


def run_artifact(artifact: Artifact, task: TaskArrays, unit: str = "s", min_seconds: float = DEFAULT_MIN_SECONDS,
                 repeats: int = DEFAULT_REPEATS, best: float | None = None) -> tuple[Status, float | None, str]:
    """(status, cost in `unit`, error) of one candidate. In seconds, repeats run at least
    `min_seconds` each and the median counts; other units (simulated cycles, which do not
    vary) take one call."""
    from akg.verify import compare

    backend = get_backend(artifact.kind)
    executable = backend.load(artifact)
    kernel = backend.entry(executable)
    tensors = [backend.to_device(a) for a in task.args]
    tensors += [backend.to_device(np.zeros(r.shape, r.dtype)) for r in task.reference]
    t0 = time.perf_counter()
    kernel(*tensors)
    first = time.perf_counter() - t0
    outs = [backend.to_numpy(t) for t in tensors[len(task.args):]]
    problems = compare(task.names, outs, task.expected())
    if problems:
        return Status.WRONG_RESULT, None, "; ".join(map(str, problems))
    if unit != "s":
        return Status.OK, float(statistics.median(backend.measure(executable, tensors, number=1, repeat=1))), ""
    if best is not None and first > SLOWDOWN_LIMIT * best and first > 0.01:
        return Status.OK, first, ""
    t0 = time.perf_counter()
    kernel(*tensors)
    once = max(time.perf_counter() - t0, 1e-7)
    if once > min_seconds:  # a long kernel: a few single runs are accurate enough
        repeats = min(repeats, 3)
    number = max(1, int(min_seconds / once))
    return Status.OK, float(statistics.median(backend.measure(executable, tensors, number=number, repeat=repeats))), ""


def compare_artifacts(artifacts: list, task: TaskArrays, unit: str = "s", rounds: int = 7,
                      min_seconds: float = DEFAULT_MIN_SECONDS) -> list[tuple[Status, list[float], str]]:
    """(status, per-round costs, error) of each artifact: each is loaded and verified, then
    all are timed in `rounds` alternating rounds (each round one `measure` of each, lasting
    about `min_seconds`, the order rotating from round to round), so that a slow spell of a
    loaded host falls on every contender alike. Other units than seconds (simulated cycles,
    which do not vary) take one call each."""
    from akg.verify import compare

    loaded: list = []
    out: list = [None] * len(artifacts)
    for i, artifact in enumerate(artifacts):
        backend = get_backend(artifact.kind)
        executable = backend.load(artifact)
        kernel = backend.entry(executable)
        tensors = [backend.to_device(a) for a in task.args]
        tensors += [backend.to_device(np.zeros(r.shape, r.dtype)) for r in task.reference]
        kernel(*tensors)
        outs = [backend.to_numpy(t) for t in tensors[len(task.args):]]
        problems = compare(task.names, outs, task.expected())
        if problems:
            out[i] = (Status.WRONG_RESULT, [], "; ".join(map(str, problems)))
            continue
        if unit != "s":
            out[i] = (Status.OK, [float(statistics.median(backend.measure(executable, tensors, number=1,
                                                                            repeat=1)))], "")
            continue
        copies = _cold_copies(backend, task, tensors)
        t0 = time.perf_counter()
        kernel(*tensors)
        once = max(time.perf_counter() - t0, 1e-7)
        loaded.append((i, backend, executable, kernel, copies or tensors, bool(copies),
                       max(1, int(min_seconds / once))))
    times: dict[int, list[float]] = {i: [] for i, *_ in loaded}
    for r in range(rounds if loaded else 0):
        shift = r % len(loaded)
        for i, backend, executable, kernel, tensors, cold, number in loaded[shift:] + loaded[:shift]:
            if cold:
                times[i].append(_time_rotating(kernel, tensors, number))
            else:
                times[i].append(float(backend.measure(executable, tensors, number=number, repeat=1)[0]))
    for i in times:
        out[i] = (Status.OK, times[i], "")
    return out


def _cold_copies(backend, task: TaskArrays, tensors: list) -> list[list] | None:
    """Argument lists whose operands beyond the first are copies of the task's (the first
    operand and the outputs shared), enough copies to overflow the last-level cache; None
    where those operands are small enough to stay in cache in a model (`COLD_BYTES`)."""
    rest = sum(a.nbytes for a in task.args[1:])
    if len(task.args) < 2 or rest <= COLD_BYTES:
        return None
    n = max(2, min(MAX_COPIES, -(-ROTATE_BYTES // rest)))
    outs = tensors[len(task.args):]
    return [[tensors[0], *(backend.to_device(a) for a in task.args[1:]), *outs] for _ in range(n)]


def _time_rotating(kernel, copies: list[list], number: int) -> float:
    """Seconds per call of `kernel` over `number` calls (at least one per copy), each on the
    next copy of its arguments."""
    calls = max(number, len(copies))
    t0 = time.perf_counter()
    for k in range(calls):
        kernel(*copies[k % len(copies)])
    return (time.perf_counter() - t0) / calls

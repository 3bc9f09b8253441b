"""The tuner's connection to a Dask cluster (tuning: where candidates are built and measured):
`DaskCluster` starts a `LocalCluster` of worker processes (one thread each) or connects to a
scheduler, asks every worker that joins which host it is and which target key its machine has
for the tuner's target, and hands out jobs to the workers of the tuner's target only — a worker
of other hardware is reported once and never used, so no record mixes timings of two machines.

Each job is pinned by the tuner to one worker (Dask's own rescheduling plays no part): a
worker builds as many candidates at once as it has threads and measures one at a time, with
the next one queued behind it. A worker lost mid-job (its process died, its machine left)
costs the job it was running one attempt: the job is queued again, at the front, for any
worker; lost a second time, it ends as its failed result, which says which workers were lost.
Every job's result is handed back exactly once. On the worker, a job's runner or builder is
made once per tuning session by a pickled factory (`worker_pool`); `DaskRunner` and
`DaskBuilder` are the `Runner` and `Builder` over one `DaskCluster`.
"""

from __future__ import annotations

import collections
import logging
import pickle
import queue
import re
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Sequence

from akg.errors import ClusterError
from akg.target import TARGETS, Target, get_target, load_plugins

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # seconds to reach a scheduler
WORKER_WAIT = 120.0  # seconds for a first worker of the tuner's target (a fresh cluster imports akg first)
NO_WORKER_GRACE = 120.0  # seconds jobs wait while no worker of the tuner's target is left, then tuning stops
POLL = 0.25  # seconds between looks at the cluster's workers while jobs are out
ATTEMPTS = 2  # a job whose worker is lost runs once more, then fails with the reason
MEASURE_DEPTH = 2  # measure jobs sent to a worker at once: one measured, one queued behind it
RESULT_WAIT = 30.0  # seconds to fetch a finished job's result (its worker may die in between)
LEAVE_GRACE = 0.2  # seconds between seeing a worker gone and settling its jobs (its last results arrive)
SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")
_ADDRESS = re.compile(r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})")


def scheduler_address(text: str) -> str:
    """A scheduler address as Dask takes it (`host:port` means tcp); ClusterError if malformed."""
    match = _ADDRESS.fullmatch(str(text).strip())
    scheme = (match["scheme"] or "tcp") if match else ""
    if match is None or scheme not in SCHEMES or not 0 < int(match["port"]) < 65536:
        raise ClusterError(f"not a Dask scheduler address: {text!r} (expected tcp://HOST:PORT)")
    return f"{scheme}://{match['host']}:{int(match['port'])}"


def target_name_of(target: Target) -> str | None:
    """The name `get_target` gives `target` by on this machine (its kind first): each worker
    resolves the same name on its own machine, and its key says what hardware it is. None:
    no name gives this target (workers are then taken to measure it as it is)."""
    load_plugins()
    names = list(TARGETS)
    if target.kind in TARGETS:
        names = [target.kind, *(n for n in names if n != target.kind)]
    for name in names:
        try:
            if TARGETS.get(name)().key == target.key:
                return name
        except Exception:  # noqa: BLE001  (a target that cannot be made here is not this one)
            continue
    return None


# --- on a Dask worker ------------------------------------------------------------------------

_lock = threading.Lock()
_pools: dict = {}  # (session, kind, spec, thread) -> this worker's runner or builder of a session
_identities: dict = {}


def dask_setup(worker) -> None:
    """Dask's preload hook, for the tuner's own LocalCluster: its workers ignore Ctrl-C (it is
    the tuner's to handle; they share its terminal), as the tuner's other workers do."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_identity(target_name: str | None, target: Target) -> tuple[str, str]:
    """(host name, target key) of this machine for the tuner's target."""
    key = (target_name, target.key)
    if key not in _identities:
        _identities[key] = (socket.gethostname(), get_target(target_name).key if target_name else target.key)
    return _identities[key]


def worker_pool(session: str, kind: str, spec: bytes, per_thread: bool):
    """This worker's runner or builder of a tuning session, made by the pickled factory `spec`."""
    key = (session, kind, spec, threading.get_ident() if per_thread else 0)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = pickle.loads(spec)()
    return pool


def timed(fn, *args):
    """(fn(*args), seconds it took), so the tuner can tell its own overhead from the job's."""
    t0 = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - t0


def release_on_worker(session: str) -> int:
    """Close this worker's runners and builders of a session (their processes, scratch folders)."""
    with _lock:
        mine = [k for k in _pools if k[0] == session]
        pools = [_pools.pop(k) for k in mine]
    for pool in pools:
        pool.close()
    return len(pools)


def factory_spec(factory: Callable) -> bytes:
    """A factory of a worker's runner or builder as bytes (cloudpickle: a class of a test
    module travels too), also the key its worker keeps the instance under."""
    import cloudpickle

    return cloudpickle.dumps(factory)


# --- the tuner's side ------------------------------------------------------------------------


@dataclass(frozen=True)
class FarmWorker:
    """A Dask worker the tuner uses: address, host name, the target key it measures, threads."""

    address: str
    host: str
    target_key: str
    threads: int = 1


@dataclass(frozen=True)
class JobTiming:
    """One finished job: seconds from sending it to having its result (`wall`), and inside
    the job on the worker (`inside`); the difference is what distributing it cost."""

    kind: str
    worker: str
    wall: float
    inside: float


@dataclass(frozen=True)
class Loss:
    """A job's worker lost mid-job (`final`: its second loss, the job failed)."""

    kind: str
    worker: str
    reason: str
    final: bool


class Job:
    """One unit of work for a worker: `fn(*args(worker))`; `fail(reason, worker)` is its result
    when it cannot be done (its worker lost twice, or it raised there). `future` gets the
    result exactly once."""

    def __init__(self, kind: str, fn: Callable, args: Callable[[str], tuple],
                 fail: Callable[[str, FarmWorker | None], object]):
        self.kind, self.fn, self.args, self.fail = kind, fn, args, fail
        self.future: Future = Future()
        self.losses: list[str] = []
        self.worker: str | None = None
        self.remote = None  # the Dask future of the current attempt
        self.sent = 0.0

    def settle(self, value) -> None:
        if not self.future.done():
            self.future.set_result(value)


class DaskCluster:
    """The tuner's connection to a Dask cluster: its own `LocalCluster` of `workers`
    processes, or the one whose scheduler is at `scheduler`. `target_name` (default: the name
    `get_target` knows the target by) is what each worker resolves to tell its hardware."""

    def __init__(self, target: Target, *, workers: int | None = None, scheduler: str | None = None,
                 target_name: str | None = None, wait: float = WORKER_WAIT):
        try:
            import distributed
        except ImportError:
            raise ClusterError("measuring on Dask needs dask.distributed: pip install 'akg[farm]'") from None
        if (workers is None) == (scheduler is None):
            raise ClusterError("give one of a number of local Dask workers and a scheduler address")
        self.target = target
        self.target_name = target_name if target_name is not None else target_name_of(target)
        self.session = uuid.uuid4().hex
        self.workers: dict[str, FarmWorker] = {}  # usable, by address
        self.excluded: dict[str, str] = {}  # address -> why it is not used
        self.timings: list[JobTiming] = []
        self.losses: list[Loss] = []
        self._local = None
        self._closed = False
        self._inbox: queue.Queue = queue.Queue()
        self._pending: collections.deque[Job] = collections.deque()
        self._running: dict[str, list[Job]] = {}
        self._probing: dict[str, object] = {}
        self._leaving: dict[str, tuple[float, FarmWorker | None]] = {}  # address -> (since, worker)
        self._sent: dict[str, set[str]] = {}  # worker -> task keys whose payload it has
        self._threads: dict[str, int] = {}
        self._no_worker_since: float | None = None
        self._ready = threading.Event()
        self._failed: str | None = None  # why no worker could be used at all (before the first)
        self._heard = time.monotonic()  # when the scheduler last answered
        if scheduler is not None:
            self.address = scheduler_address(scheduler)
            try:
                self.client = distributed.Client(self.address, timeout=CONNECT_TIMEOUT, set_as_default=False)
            except Exception as e:  # noqa: BLE001  (refused, timed out, not a scheduler: one clear line)
                raise ClusterError(f"cannot reach the Dask scheduler at {self.address} "
                                   f"({_first_line(e) or type(e).__name__})") from None
        else:
            if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
                raise ClusterError(f"the number of Dask workers must be a whole number >= 1, not {workers!r}")
            try:
                self._local = distributed.LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                    silence_logs=logging.ERROR, memory_limit=0, preload=[__name__])
                self.client = distributed.Client(self._local, set_as_default=False)
            except Exception as e:  # noqa: BLE001
                if self._local is not None:
                    self._local.close()
                raise ClusterError(f"cannot start a local Dask cluster of {workers} workers: "
                                   f"{_first_line(e)}") from None
            self.address = self._local.scheduler_address
        self._thread = threading.Thread(target=self._loop, daemon=True, name="akg-dask-dispatch")
        self._thread.start()
        try:
            self._wait_ready(wait)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"DaskCluster({self.address}, {len(self.workers)} workers of {self.target.key})"

    @property
    def identity(self) -> tuple:
        return (self.target_name, self.target)

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue jobs; each one's `future` gets its result (a ClusterError if tuning must stop)."""
        if self._closed:
            for job in jobs:
                job.future.set_exception(ClusterError("the Dask runner was closed"))
            return
        self._inbox.put(("jobs", list(jobs)))

    def first_time(self, worker: str, key: str) -> bool:
        """Is `key` (of data a worker keeps, such as a task's payload) new to `worker`? It is
        not afterwards, until the worker leaves. For the jobs' `args`, in the dispatcher."""
        sent = self._sent.setdefault(worker, set())
        if key in sent:
            return False
        sent.add(key)
        return True

    def close(self) -> None:
        """Cancel what is not done, release the workers' runners and builders; a cluster this
        started is shut down (its processes end)."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        self._thread.join(timeout=30)
        try:
            self.client.run(release_on_worker, self.session, on_error="ignore")
        except Exception as e:  # noqa: BLE001  (a worker gone: its processes went with it)
            log.debug("releasing the Dask workers' pools: %s", e)
        finally:
            try:
                self.client.close()
            finally:
                if self._local is not None:
                    self._local.close()

    # --- the dispatcher thread ------------------------------------------------------------

    def _wait_ready(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        while not self._ready.wait(0.1):
            if self._failed:
                raise ClusterError(self._failed)
            if time.monotonic() > deadline:
                raise ClusterError(f"no Dask worker of target {self.target.key} was ready at {self.address} within "
                                   f"{wait:.0f}s{self._excluded_text()}")

    def _excluded_text(self) -> str:
        return "".join(f"; {address}: {why}" for address, why in sorted(self.excluded.items()))

    def _loop(self) -> None:
        last = 0.0
        while True:
            busy = (self._pending or any(self._running.values()) or self._probing or self._leaving
                    or not self._ready.is_set())
            try:
                items = [self._inbox.get(timeout=POLL if busy else None)]
            except queue.Empty:
                items = []
            while True:
                try:
                    items.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            try:
                for item in items:
                    if item is None:
                        self._stop()
                        return
                    self._handle(item)
                if time.monotonic() - last >= POLL:
                    self._refresh()
                    last = time.monotonic()
                self._dispatch()
            except Exception as e:  # noqa: BLE001  (a bug here must fail the jobs, never hang the tuner)
                log.exception("the Dask dispatcher failed")
                self._failed = f"the Dask dispatcher failed: {type(e).__name__}: {_first_line(e)}"
                self._fail_all(ClusterError(self._failed))

    def _handle(self, item: tuple) -> None:
        what = item[0]
        if what == "jobs":
            self._pending.extend(item[1])
        elif what == "done":
            self._finished(item[1], item[2])
        elif what == "probed":
            self._probed(item[1], item[2])

    def _refresh(self) -> None:
        """Notice workers that joined (probe them) and workers that left (their jobs' loss)."""
        try:
            present = self.client.scheduler_info(n_workers=-1).get("workers", {})
            self._heard = time.monotonic()
        except Exception as e:  # noqa: BLE001  (the client reconnects by itself; meanwhile the jobs wait)
            log.debug("asking the Dask scheduler for its workers: %s", e)
            if time.monotonic() - self._heard > NO_WORKER_GRACE:
                self._fail_all(ClusterError(f"the Dask scheduler at {self.address} has not answered for "
                                            f"{NO_WORKER_GRACE:.0f}s; every measurement so far is in the database"))
            return
        now = time.monotonic()
        for address in [a for a in {*self.workers, *self._running, *self._probing} if a not in present]:
            if address not in self._leaving:  # no more jobs for it; its losses once its last results are in
                self._leaving[address] = (now, self.workers.pop(address, None))
        for address, (since, worker) in list(self._leaving.items()):
            if address in present and worker is not None:  # it reconnected
                del self._leaving[address]
                self.workers[address] = worker
            elif now - since >= LEAVE_GRACE:
                del self._leaving[address]
                self._worker_left(address, worker)
        for address, info in present.items():
            if address in self.workers or address in self.excluded or address in self._probing:
                continue
            self._threads[address] = int(info.get("nthreads", 1) or 1)
            remote = self.client.submit(timed, worker_identity, *self.identity, key=f"akg-probe-{uuid.uuid4().hex}",
                                        workers=[address], allow_other_workers=False, pure=False)
            self._probing[address] = remote
            remote.add_done_callback(lambda f, a=address: self._inbox.put(("probed", a, f)))
        if self.workers or not (self._pending or any(self._running.values())):
            self._no_worker_since = None
        elif self._no_worker_since is None:
            self._no_worker_since = time.monotonic()
            log.warning("no Dask worker of target %s is left at %s; waiting up to %.0fs for one",
                        self.target.key, self.address, NO_WORKER_GRACE)
        elif time.monotonic() - self._no_worker_since > NO_WORKER_GRACE:
            self._fail_all(ClusterError(f"no Dask worker of target {self.target.key} at {self.address} for "
                                        f"{NO_WORKER_GRACE:.0f}s{self._excluded_text()}; every measurement so far "
                                        f"is in the database"))

    def _probed(self, address: str, remote) -> None:
        if self._probing.get(address) is not remote:
            return
        del self._probing[address]
        try:
            (host, key), _ = remote.result()
        except Exception as e:  # noqa: BLE001  (the worker cannot load akg or the target)
            self.excluded[address] = f"cannot measure there: {_first_line(e) or type(e).__name__}"
            log.warning("Dask worker %s is not used: %s", address, self.excluded[address])
            self._check_none_usable()
            return
        finally:
            remote.release()
        if address in self._leaving:
            return
        if key != self.target.key:
            self.excluded[address] = (f"its machine ({host}) is {key}, not the tuner's {self.target.key}: "
                                      f"its timings would mix hardware")
            log.warning("Dask worker %s is not used: %s", address, self.excluded[address])
            self._check_none_usable()
            return
        self.workers[address] = FarmWorker(address, host, key, self._threads.get(address, 1))
        log.info("Dask worker %s (%s, %s) joined", address, host, key)
        self._ready.set()

    def _check_none_usable(self) -> None:
        """Before the first usable worker: every worker probed and refused is an error now."""
        if not self._ready.is_set() and not self._probing and not self.workers and self.excluded:
            self._failed = (f"no Dask worker at {self.address} measures the tuner's target "
                            f"{self.target.key}{self._excluded_text()}")

    def _worker_left(self, address: str, worker: FarmWorker | None) -> None:
        """The jobs `address` had in hand when it left, its results of them all taken in: the one
        it was running loses an attempt (each build), those queued behind it go back unharmed."""
        worker = self.workers.pop(address, None) or worker
        self._sent.pop(address, None)
        probe = self._probing.pop(address, None)
        if probe is not None:
            probe.cancel()
        jobs = sorted(self._running.pop(address, []), key=lambda j: j.sent)
        if worker is not None or jobs:
            log.warning("Dask worker %s%s left the cluster%s", address, f" ({worker.host})" if worker else "",
                        f" with {len(jobs)} job(s) in hand" if jobs else "")
        for k, job in reversed(list(enumerate(jobs))):  # the earliest ends up first in the queue
            if job.kind == "measure" and k > 0:  # queued behind the one it was measuring: never started
                self._requeue(job)
                continue
            self._lost(job, f"Dask worker {address}{f' on {worker.host}' if worker else ''} was lost", worker)

    def _lost(self, job: Job, reason: str, worker: FarmWorker | None) -> None:
        if job.remote is not None:
            job.remote.cancel()
            job.remote = None
        job.losses.append(reason)
        final = len(job.losses) >= ATTEMPTS
        self.losses.append(Loss(job.kind, job.worker or "", reason, final))
        if final:
            job.settle(job.fail(f"lost its Dask worker {len(job.losses)} times ({'; '.join(job.losses)})", worker))
        else:
            log.warning("%s job re-queued: %s", job.kind, reason)
            self._requeue(job)

    def _requeue(self, job: Job) -> None:
        if job.remote is not None:
            job.remote.cancel()
            job.remote = None
        self._pending.appendleft(job)

    def _finished(self, job: Job, remote) -> None:
        if job.remote is not remote:  # an attempt given up on already
            return
        address = job.worker
        running = self._running.get(address, [])
        if job in running:
            running.remove(job)
        job.remote = None
        worker = self.workers.get(address) or self._leaving.get(address, (0.0, None))[1]
        if remote.status == "finished":
            try:
                value, inside = remote.result(timeout=RESULT_WAIT)
            except Exception as e:  # noqa: BLE001  (done, but the result went with its worker: not its fault)
                log.warning("%s job re-queued: its result was lost with Dask worker %s (%s)", job.kind, address,
                            _first_line(e) or type(e).__name__)
                self._requeue(job)
                return
            finally:
                remote.release()
            self.timings.append(JobTiming(job.kind, address, time.monotonic() - job.sent, inside))
            job.settle(value)
            return
        error = remote.exception() if remote.status == "error" else None
        remote.release()
        if error is None or type(error).__name__ == "KilledWorker":
            self._lost(job, f"Dask worker {address} was lost ({_first_line(error) if error else remote.status})",
                       worker)
        else:
            job.settle(job.fail(f"{type(error).__name__}: {_first_line(error)}", worker))

    def _dispatch(self) -> None:
        """Hand out queued jobs in order, each to the least busy worker with room for it: a
        worker builds as many at once as it has threads, measures one at a time (with the
        next one queued behind it, so that it never waits for the tuner) and never does both."""
        while self._pending:
            job = self._pending[0]
            if job.future.done():  # cancelled
                self._pending.popleft()
                continue
            room = [a for a, w in self.workers.items()
                    if len(self._running.get(a, ())) < (MEASURE_DEPTH if job.kind == "measure" else w.threads)
                    and all(r.kind == job.kind for r in self._running.get(a, ()))]
            if not room:
                return
            address = min(room, key=lambda a: len(self._running.get(a, ())))
            self._pending.popleft()
            self._send(job, address, self._running.setdefault(address, []))

    def _send(self, job: Job, address: str, running: list) -> None:
        try:
            args = job.args(address)
        except Exception as e:  # noqa: BLE001  (this job cannot be sent; the others can)
            job.settle(job.fail(f"cannot send it to a Dask worker: {type(e).__name__}: {_first_line(e)}", None))
            return
        job.worker, job.sent = address, time.monotonic()
        job.remote = self.client.submit(timed, job.fn, *args, key=f"akg-{job.kind}-{uuid.uuid4().hex}",
                                        workers=[address], allow_other_workers=False, pure=False, retries=0)
        job.remote.add_done_callback(lambda f, j=job: self._inbox.put(("done", j, f)))
        running.append(job)

    def _fail_all(self, error: ClusterError) -> None:
        jobs = list(self._pending) + [j for js in self._running.values() for j in js]
        self._pending.clear()
        self._running.clear()
        for job in jobs:
            if job.remote is not None:
                job.remote.cancel()
                job.remote = None
            if not job.future.done():
                job.future.set_exception(error)
        self._no_worker_since = None

    def _stop(self) -> None:
        jobs = list(self._pending) + [j for js in self._running.values() for j in js]
        self._pending.clear()
        self._running.clear()
        remotes = [j.remote for j in jobs if j.remote is not None] + list(self._probing.values())
        for job in jobs:
            job.future.cancel()
        if remotes:
            try:
                self.client.cancel(remotes)
            except Exception as e:  # noqa: BLE001
                log.debug("cancelling Dask jobs: %s", e)


def _first_line(error: BaseException | None) -> str:
    text = str(error) if error is not None else ""
    return text.strip().splitlines()[0] if text.strip() else ""

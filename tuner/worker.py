"""Worker processes of the tuner's builder and runner, tied to the tuner's lifetime.

A `Worker` is one child process (`python -c "...worker import main; main()"`) that runs
requests (a picklable function and its arguments) one at a time over a socket pair. It never
outlives the process that started it:

- Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGKILL)`), set by the child as it
  starts, then `getppid()` checked for a parent that died before that; the signal follows
  the *thread* that forked the child, so every worker is started by one long-lived spawner
  thread (`_spawn`);
- a watchdog thread in the child that exits when its lifeline pipe (whose write end only
  the parent holds) closes, for systems without the signal;
- the tuner's process group, which it stays in: a signal to the group reaches the workers
  (they ignore SIGINT: Ctrl-C is the tuner's to handle).

No `multiprocessing` process is involved, so no resource tracker is started either.

The child's stdout and stderr go to an unlinked temporary file that the parent holds open
and empties before each request: when a request kills the worker (a segfault, an abort),
what the worker printed while it ran (a native stack dump, say) is `WorkerDied.report`,
for the record's error text instead of the user's terminal.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection, Pipe

PR_SET_PDEATHSIG = 1
REPORT_CHARS = 1800  # of a dead worker's output kept for the record (the top of a stack dump)
STARTUP_LIMIT = 120.0  # seconds a worker may take to import what it needs and say it is ready

_BOOT = "from akg.tuner.worker import main; main()"


class WorkerDied(Exception):
    """The worker exited (or its pipe broke) before it answered; `cause` says how (a signal,
    an exit code), `report` is what it printed while handling the request."""

    def __init__(self, cause: str, report: str = ""):
        super().__init__(cause)
        self.cause, self.report = cause, report

    def describe(self, what: str) -> str:
        """`what (cause)` and the report on the lines below."""
        text = f"{what} ({self.cause})"
        return f"{text}\n{self.report}" if self.report else text


class WorkerError(Exception):
    """The request raised in the worker (the text is the worker's one-line account)."""


# --- the child side --------------------------------------------------------------------------


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog and the pipe still end it
        pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


def _watchdog(lifeline: int, parent_pid: int) -> None:
    """Exit as soon as the parent's end of the lifeline closes (it died or let go of us)."""
    try:
        while os.read(lifeline, 64):
            pass
    except OSError:
        pass
    os._exit(1)


def main(argv: list[str] | None = None) -> None:
    """The worker: `<role> <parent pid> <connection fd> <lifeline fd>`; first message from
    the parent: (sys.path, modules to import); then requests (function, args) until None or
    a closed connection."""
    argv = sys.argv[1:] if argv is None else argv
    _role, parent_pid, conn_fd, lifeline = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the tuner's to handle
    threading.Thread(target=_watchdog, args=(lifeline, parent_pid), daemon=True, name="akg-watchdog").start()
    conn = Connection(conn_fd)
    try:
        path, modules = conn.recv()
    except (EOFError, OSError):
        return
    for entry in path:
        if entry not in sys.path:
            sys.path.append(entry)
    import importlib

    for name in modules:  # "module" or "module:function" (called)
        module, _, function = name.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            message = pickle.loads(data)
            if message is None:
                return
            fn, args = message
            reply = ("ok", fn(*args))
        except Exception as e:  # noqa: BLE001  (reported to the parent, the worker goes on)
            first = str(e).splitlines()[0] if str(e) else ""
            reply = ("error", f"{type(e).__name__}: {first}")
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.send(reply)
        except (OSError, EOFError):
            return


# --- the parent side -------------------------------------------------------------------------

_spawn_queue: queue.Queue = queue.Queue()
_spawn_lock = threading.Lock()
_spawner: threading.Thread | None = None


def _spawn_loop() -> None:
    while True:
        args, kwargs, reply = _spawn_queue.get()
        try:
            reply.put((True, subprocess.Popen(args, **kwargs)))
        except BaseException as e:  # noqa: BLE001  (handed back to the caller)
            reply.put((False, e))


def _spawn(args: list[str], **kwargs) -> subprocess.Popen:
    """Popen from one thread that lives as long as this process: the parent-death signal
    follows the thread that forked, and the builder's and runner's own threads come and go."""
    global _spawner
    with _spawn_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawn_loop, daemon=True, name="akg-spawner")
            _spawner.start()
    reply: queue.Queue = queue.Queue(1)
    _spawn_queue.put((args, kwargs, reply))
    try:
        ok, value = reply.get()
    except BaseException:  # interrupted (Ctrl-C) while the process starts: it must not be left
        ok, value = reply.get()
        if ok:
            value.kill()
            value.wait()
        raise
    if not ok:
        raise value
    return value


def _signal_name(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Worker:
    """One worker process (`role` names it in `ps`); `modules` ("module" or "module:function",
    which is called) are imported before it says it is ready, so that their start-up does not
    count against a request's time limit."""

    def __init__(self, role: str, modules: tuple[str, ...] = ()):
        self.role = role
        self.started = time.monotonic()
        self.ready = False
        self.busy_since: float | None = None
        self._output = tempfile.TemporaryFile(prefix=f"akg-{role}-")  # unlinked: nothing is left behind
        # O_APPEND: the child always writes at the end, also after the parent emptied the file
        fd = self._output.fileno()
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        ours, theirs = Pipe(duplex=True)
        life_read, self._lifeline = os.pipe()
        try:
            self.proc = _spawn([sys.executable, "-c", _BOOT, role, str(os.getpid()), str(theirs.fileno()),
                                str(life_read)],
                               pass_fds=(theirs.fileno(), life_read), stdin=subprocess.DEVNULL,
                               stdout=self._output, stderr=self._output, close_fds=True)
        except BaseException:
            ours.close()
            os.close(self._lifeline)
            self._output.close()
            raise
        finally:
            theirs.close()
            os.close(life_read)
        self.conn = ours
        try:
            self.conn.send((list(sys.path), tuple(modules)))
        except OSError:  # it died at once: `wait_ready` says so
            pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fileno(self) -> int:
        return self.conn.fileno()

    def alive(self) -> bool:
        return self.proc.poll() is None

    # requests

    def wait_ready(self, timeout: float = STARTUP_LIMIT) -> None:
        """Block until the worker has started (WorkerDied if it dies or takes too long)."""
        if self.ready:
            return
        left = self.started + timeout - time.monotonic()
        if not self.poll(max(0.0, left)):
            self.kill()
            raise WorkerDied(f"did not start within {timeout:.0f}s")
        self.receive_ready()

    def receive_ready(self) -> None:
        message = self._receive()
        if not (isinstance(message, tuple) and message and message[0] == "ready"):
            self.kill()
            raise WorkerDied(f"said {message!r} instead of starting")
        self.ready = True

    def send(self, fn, *args) -> None:
        """Start a request; WorkerDied if the worker is gone (before it read the request),
        WorkerError if the request cannot be pickled (the worker is left as it was)."""
        try:
            data = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001  (a candidate that cannot travel fails alone)
            raise WorkerError(f"cannot send the request to a worker: {type(e).__name__}: {e}") from None
        self.busy_since = time.monotonic()
        try:
            self._output.truncate(0)
            self.conn.send_bytes(data)
        except (OSError, EOFError, ValueError) as e:  # BrokenPipe, ConnectionReset, closed
            raise self._died(e) from None

    def poll(self, timeout: float) -> bool:
        """True when an answer (or the worker's death) can be received."""
        try:
            return self.conn.poll(timeout)
        except (OSError, EOFError, ValueError):
            return True

    def receive(self):
        """The answer to the request sent (WorkerDied, or WorkerError if it raised)."""
        kind, value = self._receive()
        self.busy_since = None
        if kind == "error":
            raise WorkerError(value)
        return value

    def call(self, fn, *args, timeout: float):
        """`fn(*args)` in the worker; TimeoutError (the worker is killed) past `timeout` s."""
        self.wait_ready()
        self.send(fn, *args)
        if not self.poll(timeout):
            self.kill()
            raise TimeoutError(f"no result within {timeout:g}s")
        return self.receive()

    def _receive(self):
        try:
            return self.conn.recv()
        except (OSError, EOFError, ValueError, pickle.UnpicklingError) as e:
            raise self._died(e) from None

    def _died(self, error: BaseException) -> WorkerDied:
        try:
            returncode = self.proc.wait(5)
        except subprocess.TimeoutExpired:  # the pipe broke but the process lingers
            returncode = None
        cause = _signal_name(returncode) if returncode is not None else f"{type(error).__name__}: {error}"
        report = self.output()
        self.kill()
        return WorkerDied(cause, report)

    def output(self) -> str:
        """What the worker printed since its current request was sent (the top of it)."""
        try:
            data = os.pread(self._output.fileno(), REPORT_CHARS * 4, 0)
        except (OSError, ValueError):
            return ""
        text = data.decode("utf-8", "replace").strip()
        if len(text) > REPORT_CHARS:
            text = text[:REPORT_CHARS].rsplit("\n", 1)[0] + "\n..."
        return text

    # ending

    def ask_to_exit(self) -> None:
        """Tell an idle worker to exit (`close` waits for it)."""
        if self.alive():
            try:
                self.conn.send(None)
            except (OSError, EOFError, ValueError):
                pass

    def close(self, grace: float = 2.0) -> None:
        """Ask the worker to exit, kill it if it has not within `grace` s."""
        self.ask_to_exit()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def stop(self) -> None:
        """SIGKILL the worker and nothing else: a thread waiting on its answer wakes up and
        sees it died (then releases it with `kill`)."""
        if self.proc.returncode is None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except OSError:
                pass

    def kill(self) -> None:
        """Kill the worker (if alive), reap it and release its pipes and output file."""
        if self.proc.poll() is None:
            self.stop()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover  (a process stuck in the kernel)
                pass
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        self.conn.close()
        self._output.close()

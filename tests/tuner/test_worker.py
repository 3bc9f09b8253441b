"""Worker processes (akg.tuner.worker): they die with their parent (the parent-death signal,
and the lifeline watchdog where the signal is not armed), what a dying worker printed is the
error's report, a worker that cannot start says why, and requests that raise do not end it."""

import faulthandler
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from akg.tuner.worker import Worker, WorkerDied, WorkerError


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_requests_run_in_the_worker_and_errors_do_not_end_it():
    worker = Worker("probe")
    try:
        assert worker.call(os.getpid, timeout=30) == worker.pid != os.getpid()
        with pytest.raises(WorkerError, match="FileNotFoundError"):
            worker.call(os.stat, "/no/such/file", timeout=30)
        with pytest.raises(WorkerError, match="cannot send"):
            worker.call(lambda: 0, timeout=30)  # cannot be pickled: nothing was sent
        assert worker.call(os.getppid, timeout=30) == os.getpid()
        assert os.getpgid(worker.pid) == os.getpgid(0)  # in the tuner's process group
        with pytest.raises(TimeoutError):
            worker.call(time.sleep, 30, timeout=0.5)
        assert _gone(worker.pid)  # a request over its limit takes the worker with it
    finally:
        worker.kill()


def test_a_dying_worker_reports_what_it_printed():
    worker = Worker("probe")
    try:
        worker.call(faulthandler.enable, timeout=30)
        with pytest.raises(WorkerDied) as died:
            worker.call(faulthandler._sigsegv, timeout=30)
        assert died.value.cause == "killed by SIGSEGV"
        assert "Fatal Python error: Segmentation fault" in died.value.report
        assert "the kernel crashed (killed by SIGSEGV)\nFatal Python error" in died.value.describe("the kernel crashed")
    finally:
        worker.kill()


def test_a_worker_that_cannot_start_says_why():
    worker = Worker("probe", ("akg_no_such_module",))
    with pytest.raises(WorkerDied) as died:
        worker.wait_ready()
    assert "exit code 1" in died.value.cause and "No module named 'akg_no_such_module'" in died.value.report


def test_the_watchdog_ends_a_worker_whose_parent_let_go():
    worker = Worker("probe")
    try:
        worker.wait_ready()
        os.close(worker._lifeline)  # what the parent's death does to the lifeline
        worker._lifeline = -1
        assert worker.proc.wait(5) == 1
    finally:
        worker.kill()


PARENT = textwrap.dedent("""
    import os, sys, time
    from akg.tuner.worker import Worker

    worker = Worker("probe")
    worker.wait_ready()
    if os.fork() == 0:  # a child holds the lifeline open: only the parent-death signal is left
        time.sleep(60)
        os._exit(0)
    print(worker.pid, flush=True)
    time.sleep(60)
""")


def test_a_worker_dies_with_its_parent_process():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        pid = int(parent.stdout.readline())
        assert not _gone(pid, 0.2)
        parent.kill()
        parent.wait()
        assert _gone(pid)
    finally:
        try:
            os.killpg(parent.pid, signal.SIGKILL)  # the forked child
        except ProcessLookupError:
            pass
        parent.wait()

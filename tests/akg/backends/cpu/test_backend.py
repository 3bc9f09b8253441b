"""The CPU backend's process settings: TVM's worker threads do not keep a core busy once a
model call has returned."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A model whose kernel runs on two threads; after its calls, the CPU time every thread but
# the caller's spends in the next 300 ms (the caller sleeps).
_SCRIPT = textwrap.dedent("""
    import glob, os, threading, time
    import numpy as np
    from akg.api import compile_model
    from akg.graph import GraphBuilder

    b = GraphBuilder("mm")
    x, w = b.input("x", (256, 256)), b.input("w", (256, 256))
    b.output(b.relu(b.matmul(x, w)))
    model = compile_model(b.build())
    args = [np.random.rand(256, 256).astype(np.float32) for _ in range(2)]

    def busy_ns():
        me, total = threading.get_native_id(), 0
        for stat in glob.glob(f"/proc/{os.getpid()}/task/*/schedstat"):
            if int(stat.split("/")[-2]) != me:
                total += int(open(stat).read().split()[0])
        return total

    for _ in range(20):
        model(*args)
    time.sleep(0.02)
    before = busy_ns()
    time.sleep(0.3)
    print((busy_ns() - before) / 1e6)
""")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads per-thread CPU time from /proc")
def test_worker_threads_sleep_soon_after_a_call():
    env = {k: v for k, v in os.environ.items() if k != "TVM_THREAD_POOL_SPIN_COUNT"}
    env["TVM_NUM_THREADS"] = "2"  # a worker thread besides the caller, on any machine
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    busy_ms = float(done.stdout.split()[-1])
    assert busy_ms < 30, f"threads other than the caller's ran {busy_ms:.0f} ms in the 300 ms after the calls"


def test_the_users_spin_count_is_kept():
    script = "import akg.backends.cpu.backend, os; print(os.environ['TVM_THREAD_POOL_SPIN_COUNT'])"
    env = dict(os.environ, TVM_THREAD_POOL_SPIN_COUNT="1234")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[-1] == "1234", done.stderr[-2000:]

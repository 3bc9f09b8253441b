"""Body of one writer process of tests/db/test_sql.py, run with `runpy.run_path` in a spawned
process (test modules are not importable by name there). Globals given by the test: URL,
WORKER, COUNT, SHARED, RESULT, and optionally BARRIER and KILL_AFTER.

Like one `akg tune` process, it commits each record as it is "measured": COUNT records of its
own, and SHARED records whose configs every worker tries to add."""

import json
import os
import signal
from pathlib import Path

from akg.db import Record, SqlDatabase

g = globals()
db = SqlDatabase(g["URL"])
if g.get("BARRIER") is not None:
    g["BARRIER"].wait(timeout=120)
new_own = new_shared = 0
for j in range(g["COUNT"]):
    worker = g["WORKER"]
    new_own += db.add(Record(f"w{worker % 2}", "cpu-test", {"worker": worker, "j": j}, "ok", 1e-3 + j * 1e-6))
    if j < g["SHARED"]:
        new_shared += db.add(Record("shared", "cpu-test", {"j": j}, "ok", 1.0 + worker))
    if g.get("KILL_AFTER") == j + 1:
        os.kill(os.getpid(), signal.SIGKILL)
db.close()
Path(g["RESULT"]).write_text(json.dumps({"own": new_own, "shared": new_shared}))

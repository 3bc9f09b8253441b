"""Body of one claimer process of tests/db/test_leases.py, run with `runpy.run_path` in a
spawned process. Globals given by the test: URL, WORKER, FIRST, SECOND (lists of configs),
BARRIER, RESULT.

First every claimer leases all of FIRST at once, in its own order (nothing is measured);
then, like a tuner, it walks SECOND in small batches: claim, "measure" (add a record) what it
got, release."""

import json
import random
from pathlib import Path

from akg.db import Record, SqlDatabase

g = globals()
db = SqlDatabase(g["URL"])
owner = f"claimer{g['WORKER']}"
rng = random.Random(g["WORKER"])
first, second = list(g["FIRST"]), list(g["SECOND"])
rng.shuffle(first)
rng.shuffle(second)
g["BARRIER"].wait(timeout=120)
leased = []
for start in range(0, len(first), 7):
    leased += db.claim("w", "cpu-test", first[start:start + 7], owner, 600)
g["BARRIER"].wait(timeout=120)
measured, new = [], 0
for start in range(0, len(second), 5):
    got = db.claim("w2", "cpu-test", second[start:start + 5], owner, 600)
    for config in got:
        new += db.add(Record("w2", "cpu-test", config, "ok", 1.0))
    db.release(owner, "w2", "cpu-test", got)
    measured += got
db.close()
Path(g["RESULT"]).write_text(json.dumps({"leased": leased, "measured": measured, "new": new}))

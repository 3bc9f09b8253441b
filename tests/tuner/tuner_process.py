"""Body of one tuner process of tests/tuner/test_shared_database.py, run with `runpy.run_path`
in a spawned process. Globals given by the test: URL, TRIALS, BATCH, BARRIER, RESULT. It
tunes a small matmul with the fake builder and runner and writes what it measured."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fake_measure import FakeBuilder, FakeRunner  # noqa: E402

from akg.graph import GraphBuilder  # noqa: E402
from akg.tuner.tune import tune  # noqa: E402

g = globals()
b = GraphBuilder("mm")
b.output(b.relu(b.matmul(b.input("a", (32, 32)), b.input("w", (32, 32)))))
graph = b.build()
# Both start together, and each measures its first round only once the other holds one too: on
# a loaded host one process could otherwise spend the whole budget before the other has built
# its task (the test asserts both did part of the work).
runner = FakeRunner(delay=0.02, before_first=lambda: g["BARRIER"].wait(timeout=120))
g["BARRIER"].wait(timeout=120)
result = tune(graph, trials=g["TRIALS"], db=g["URL"], builder=FakeBuilder(), runner=runner, batch=g["BATCH"],
              cost_model="random", search="random", confirm=False)
Path(g["RESULT"]).write_text(json.dumps({"measured": runner.measured, "new": result.new_measurements,
                                          "trials": result.kernels[0].trials}))

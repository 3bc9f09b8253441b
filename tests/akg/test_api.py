"""akg.api: kernels and models built with the best record of a tuning database, including
records written before configs were schedule steps."""

import json

import numpy as np

import akg
from akg.db import Record, TargetInfo, Workload, open_database
from akg.graph import GraphBuilder
from akg.graph.subgraph import Subgraph
from akg.schedules.cpu import BandConfig, bands_of, cpu_config
from akg.schedules.space import Config
from akg.target import get_target

# A config as the database stored it before configs were steps (every record until now).
OLD_FORM = {"bands": [{"order": [0, 1], "pack": False, "register": [4, 16], "sink": True, "tile": [16, 0]}],
            "fast_math": True, "fusion": "smart", "parallel": False, "promote": True, "unroll": False,
            "vectorize": True}


def _matmul():
    b = GraphBuilder("mm")
    b.output(b.relu(b.matmul(b.input("a", (48, 40)), b.input("w", (40, 64)))))
    return b.build()


def test_an_old_form_record_is_read_as_the_same_steps():
    config = Config.from_json(json.dumps(OLD_FORM))
    assert bands_of(config) == (BandConfig((0, 1), (16, 0), (4, 16), True, False),)
    assert config == cpu_config(bands=(BandConfig((0, 1), (16, 0), (4, 16), True),), parallel=False, unroll=False)
    assert not config.has("map") and config.has("vectorize") and not config.has("unroll")
    assert Config.from_json(config.to_json()) == config


def test_build_takes_an_old_form_record_from_the_database(tmp_path):
    graph = _matmul()
    target = get_target("cpu")
    db = open_database(str(tmp_path / "old.db"))
    db.register_target(TargetInfo.of(target))
    db.register_workload(Workload.of(Subgraph(graph)))
    db.add(Record(Subgraph(graph).workload_key, target.key, json.dumps(OLD_FORM, sort_keys=True), "ok", 1e-6))
    kernel = akg.build(graph, db=db)
    assert kernel.config_source.startswith("tuned") and kernel.config == Config.from_json(json.dumps(OLD_FORM))
    same = akg.build(graph, config=Config.from_json(json.dumps(OLD_FORM)))
    assert kernel.tir() == same.tir()
    a = np.random.default_rng(0).standard_normal((48, 40)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((40, 64)).astype(np.float32)
    np.testing.assert_allclose(kernel(a, w)[0], np.maximum(a @ w, 0), rtol=1e-4, atol=1e-4)
    model = akg.compile_model(graph, db=db)
    assert model.stats["tuned_kernels"] == 1

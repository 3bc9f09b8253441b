"""Record, Workload, TargetInfo: canonical configs, validation, UTC timestamps."""

from datetime import datetime, timedelta, timezone

import pytest

from akg.db import Record, Status, TargetInfo, Unit, Workload, canonical_config
from akg.errors import DatabaseError


def test_config_json_is_canonical_whatever_its_spelling():
    assert canonical_config('{"b": 1, "a": [1, 2]}') == '{"a":[1,2],"b":1}'
    assert canonical_config({"a": [1, 2], "b": 1}) == '{"a":[1,2],"b":1}'
    r = Record("w", "t", '{ "b":1,"a":[1, 2] }', Status.OK, 1.0)
    assert r.config == '{"a":[1,2],"b":1}'


def test_a_schedule_config_is_stored_as_its_to_json():
    from akg.schedules.cpu import BandConfig, cpu_config
    from akg.schedules.space import Config

    config = cpu_config(fusion="max", bands=(BandConfig((1, 0), (8, 0), (0, 0), True),), vectorize=False)
    r = Record("w", "t", config, "ok", 2e-6)
    assert r.config == config.to_json()
    assert Config.from_json(r.config) == config


def test_strings_become_status_and_unit():
    r = Record("w", "t", "{}", "timeout", None, "cycles", error="took 10s")
    assert (r.status, r.unit, r.ok) == (Status.TIMEOUT, Unit.CYCLES, False)
    assert str(r.status) == "timeout"


@pytest.mark.parametrize("kwargs, message", [
    ({"status": "crashed"}, "crashed"),
    ({"unit": "ms"}, "ms"),
    ({"cost": None}, "finite cost"),
    ({"cost": float("inf")}, "finite cost"),
    ({"cost": -1.0}, "finite cost"),
    ({"config": "[1, 2]"}, "JSON object"),
    ({"config": "{not json"}, "not JSON"),
    ({"workload_key": ""}, "workload key"),
])
def test_bad_records_are_refused(kwargs, message):
    fields = {"workload_key": "w", "target_key": "t", "config": "{}", "status": "ok", "cost": 1.0, **kwargs}
    with pytest.raises(DatabaseError, match=message):
        Record(**fields)


def test_failed_records_may_have_no_cost_and_nan_means_none():
    assert Record("w", "t", "{}", "run_error").cost is None
    assert Record("w", "t", "{}", "wrong_result", float("nan")).cost is None
    assert Record("w", "t", "{}", "wrong_result", 3.0).cost == 3.0


def test_timestamps_are_utc():
    local = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    r = Record("w", "t", "{}", "ok", 1.0, timestamp=local)
    assert r.timestamp == local and r.timestamp.tzinfo == timezone.utc and r.timestamp.hour == 10
    naive = Record("w", "t", "{}", "ok", 1.0, timestamp=datetime(2024, 5, 1, 12, 0))
    assert naive.timestamp.tzinfo == timezone.utc and naive.timestamp.hour == 12
    assert abs(Record("w", "t", "{}", "ok", 1.0).timestamp - datetime.now(timezone.utc)) < timedelta(seconds=5)


def test_defaults_name_this_host_and_versions():
    import socket

    from akg import __version__

    r = Record("w", "t", "{}", "ok", 1.0)
    assert (r.host, r.akg_version) == (socket.gethostname(), __version__)
    assert r.tvm_version.startswith("0.")


def test_workload_of_a_subgraph_uses_its_key_name_and_canonical_form():
    import json

    from akg.graph import GraphBuilder
    from akg.graph.subgraph import Subgraph

    b = GraphBuilder("layer")
    b.output(b.relu(b.input("x", (4, 8))))
    sub = Subgraph(b.build())
    w = Workload.of(sub)
    assert (w.key, w.name) == (sub.workload_key, "layer")
    assert json.loads(w.description)["nodes"][0][0] == "relu"


def test_target_info_of_a_target_uses_its_key():
    import json

    from akg.backends.cpu import CpuTarget

    target = CpuTarget(mcpu="skylake", vector_bits=512, cores=8, features=("+avx512f",))
    info = TargetInfo.of(target)
    assert info.key == "cpu-skylake-512b-8c"
    assert json.loads(info.description)["features"] == ["+avx512f"]

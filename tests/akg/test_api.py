"""akg.api: kernels and models built with the best record of a tuning database, including
records written before configs were schedule steps."""

import json

import numpy as np
import pytest

import akg
from akg.errors import ScheduleError
from akg.db import Record, TargetInfo, Workload, open_database
from akg.graph import GraphBuilder
from akg.graph.pipeline import plan_model
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


def test_a_stored_config_that_no_longer_fits_the_schedule_builds_the_default(tmp_path, caplog):
    """A config tuned when akg scheduled the kernel differently (here: a band more than the
    schedule has now) is not an error for `akg compile`: the default is built, and said so."""
    graph = _matmul()
    target = get_target("cpu")
    db = open_database(str(tmp_path / "stale.db"))
    db.register_target(TargetInfo.of(target))
    db.register_workload(Workload.of(Subgraph(graph)))
    bands = (BandConfig((0, 1), (16, 0), (4, 16), True), BandConfig((0,), (8,), (0,), False))
    db.add(Record(Subgraph(graph).workload_key, target.key, cpu_config(bands=bands).to_json(), "ok", 1e-6))
    with caplog.at_level("WARNING", logger="akg.compiler"):
        kernel = akg.build(graph, db=db)
    assert kernel.config_source.startswith("default (the tuned config no longer fits: config maps 2 bands")
    assert kernel.tir() == akg.build(graph).tir()
    assert "no longer fits this kernel's schedule" in caplog.text
    a = np.random.default_rng(0).standard_normal((48, 40)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((40, 64)).astype(np.float32)
    np.testing.assert_allclose(kernel(a, w)[0], np.maximum(a @ w, 0), rtol=1e-4, atol=1e-4)
    with pytest.raises(ScheduleError, match="config maps 2 bands"):  # given, not stored: an error
        akg.build(graph, config=cpu_config(bands=bands))


# --- akg.compile / akg.run / akg.tune: one door for every model form ---------------------------


def _matmul_onnx():
    """_matmul() as an ONNX model, with the same input names."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("MatMul", ["a", "w"], ["mm"]), helper.make_node("Relu", ["mm"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [48, 40]),
                                            helper.make_tensor_value_info("w", TensorProto.FLOAT, [40, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [48, 64])])
    return onnx, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_compile_and_run_take_a_graph_a_path_and_an_onnx_model(tmp_path):
    from akg.graph.io import save_mir

    onnx, proto = _matmul_onnx()
    onnx.save(proto, str(tmp_path / "mm.onnx"))
    save_mir(_matmul(), tmp_path / "mm.mir")
    a = np.random.default_rng(2).standard_normal((48, 40)).astype(np.float32)
    w = np.random.default_rng(3).standard_normal((40, 64)).astype(np.float32)
    want = np.maximum(a @ w, 0)
    for model in (_matmul(), tmp_path / "mm.mir", str(tmp_path / "mm.onnx"), proto):
        compiled = akg.compile(model, target="cpu")
        assert [s.name for s in compiled.inputs] == ["a", "w"]
        np.testing.assert_allclose(compiled(a=a, w=w)[0], want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(akg.run(model, [a, w])[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(akg.run(proto, {"a": a, "w": w})[0], want, rtol=1e-4, atol=1e-4)


def test_an_onnx_model_gets_the_tuned_config_of_the_same_graph_from_the_database(tmp_path):
    _, proto = _matmul_onnx()
    graph = _matmul()
    target = get_target("cpu")
    db = open_database(str(tmp_path / "tuned.db"))
    db.register_target(TargetInfo.of(target))
    db.register_workload(Workload.of(Subgraph(graph)))
    db.add(Record(Subgraph(graph).workload_key, target.key, json.dumps(OLD_FORM, sort_keys=True), "ok", 1e-6))
    assert akg.compile(proto, db=db).stats["tuned_kernels"] == 1  # the same workload as the .mir graph
    assert akg.compile(proto).stats["tuned_kernels"] == 0


def test_tune_takes_an_onnx_model(tmp_path):
    _, proto = _matmul_onnx()
    db = open_database(str(tmp_path / "tune.db"))
    akg.tune(proto, target="cpu", trials=2, db=db, batch=2, confirm=False)
    measured = db.records(Subgraph(_matmul()).workload_key, get_target("cpu").key)
    assert len(measured) >= 1  # recorded under the workload of the same graph loaded from .mir


def test_build_finds_the_config_tuned_for_a_graph_of_composite_ops(tmp_path):
    # `tune` plans a softmax into a kernel of basic ops, under another workload key than the
    # graph's own: `build` with the database builds that kernel, with the config recorded for it
    b = GraphBuilder("softmax")
    b.output(b.softmax(b.input("x", (64, 256))))
    graph = b.build()
    target = get_target("cpu")
    (kernel,) = plan_model(graph, target).kernels
    assert kernel.subgraph.workload_key != Subgraph(graph).workload_key
    default = akg.build(kernel.subgraph, target)
    (band,) = bands_of(default.config)
    tuned = cpu_config(default.config.fusion, (BandConfig(band.order, (16,), (0,), False, False),))
    assert tuned != default.config
    db = open_database(str(tmp_path / "softmax.db"))
    db.register_target(TargetInfo.of(target))
    db.register_workload(Workload.of(kernel.subgraph))
    db.add(Record(kernel.subgraph.workload_key, target.key, tuned.to_json(), "ok", 1e-6))
    built = akg.build(graph, db=db)
    assert built.config == tuned and built.config_source.startswith("tuned")
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(built(x)[0], want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert akg.build(graph).config_source == "default"

"""The importer framework: op tables and FRONTENDS as registries, `load_model` on files and on
in-memory models (the same graph either way), typed errors listing what is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from akg.errors import ImportFormatError, MissingRuleError
from akg.graph import GraphBuilder
from akg.graph.io.torch_fx import load_pt2
from akg.graph.io import FRONTENDS, LOADERS, load_akg_json, load_mindir, load_mir, load_model, load_onnx, save_mir
from akg.graph.io.akg_json_ops import AKG_OPS
from akg.graph.io.importer import (
    Frontend, ImportFail, OpContext, OpMapping, OpTable, graph_name_of, read_model_file, register_frontend,
    sanitize_name, unique_name,
)
from akg.graph.io.mindir import MINDIR_OPS
from akg.registry import Registry

MINDIR_CORPUS = Path("/work/shared/corpus/mindir")
needs_mindir = pytest.mark.skipif(not (MINDIR_CORPUS / "mlp.mindir").is_file(),
                                  reason=f"MindIR corpus not at {MINDIR_CORPUS}")


def same_graph(a, b) -> bool:
    """Equal but for the graph's name (an in-memory model has no file to be named after)."""
    if a.structure()[1:] != b.structure()[1:]:
        return False
    theirs = {v.name: x for v, x in b.constants.items()}
    return all(np.array_equal(x, theirs[v.name]) for v, x in a.constants.items())


# --- registries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("table", [AKG_OPS, MINDIR_OPS], ids=["akg_json", "mindir"])
def test_every_op_table_key_maps_to_its_entry(table):
    assert isinstance(table, OpTable) and len(table) > 40
    for name in table:
        entry = table.get(name)
        assert isinstance(entry, OpMapping)
        assert entry.name == name and entry.ops and callable(entry.convert)


def test_op_table_entries_hold_their_summaries():
    assert AKG_OPS.get("Add").ops == "add" and AKG_OPS.get("TensorAdd").ops == "add"
    assert AKG_OPS.get("MatMul").convert is AKG_OPS.get("BatchMatMul").convert  # one converter, two names
    assert MINDIR_OPS.get("ReLU").ops == "relu"
    assert MINDIR_OPS.get("MaxPool").convert is MINDIR_OPS.get("AvgPool").convert
    assert (AKG_OPS.source, MINDIR_OPS.source) == ("AKG op", "MindSpore primitive")


def test_op_table_missing_key_lists_the_known_ones():
    with pytest.raises(MissingRuleError, match=r"no mapping from the AKG op for 'Frob' \(known: Abs, Add, "):
        AKG_OPS.get("Frob")


def test_registry_decorator_registers_each_name_and_returns_the_function():
    reg: Registry = Registry("thing")

    @reg.decorator("a", "b")
    def f():
        return 1

    @reg.decorator("c", make=lambda name, fn: (name, fn))
    def g():
        return 2

    assert f() == 1 and reg.get("a") is f and reg.get("b") is f
    assert reg.get("c") == ("c", g)
    with pytest.raises(ValueError, match="thing 'a' is registered twice"):
        reg.decorator("a")(g)
    assert reg.get("a") is f


def test_frontends_are_named_by_their_keys_and_own_the_suffixes():
    assert list(FRONTENDS) == ["akg_json", "mindir", "mir", "onnx", "torch"]
    for name, frontend in FRONTENDS.items():
        assert frontend.name == name and frontend.suffixes and frontend.takes
    assert dict(LOADERS) == {".json": load_akg_json, ".info": load_akg_json, ".mindir": load_mindir,
                             ".mir": load_mir, ".onnx": load_onnx, ".pt2": load_pt2}


def test_a_suffix_is_claimed_by_one_frontend():
    clash = Frontend("other", (".mir",), load_mir, load_mir, lambda obj: False, "nothing")
    with pytest.raises(ValueError, match=r"suffix '.mir' of frontend 'other' is taken by 'mir'"):
        register_frontend(clash)
    assert "other" not in FRONTENDS


@pytest.mark.parametrize("obj, name", [({"op_desc": []}, "akg_json"), ([{}], "akg_json"),
                                       (b"\x00", "mindir"), (bytearray(b"\x00"), "mindir"),
                                       ("graph @g() {\n}\n", "mir"), ("# c\n  graph @g() {}", "mir")])
def test_each_in_memory_kind_has_one_frontend(obj, name):
    assert [n for n, f in FRONTENDS.items() if f.accepts(obj)] == [name]


def test_a_path_string_is_not_mir_text():
    assert not FRONTENDS.get("mir").accepts("examples/mlp.mir")
    assert not FRONTENDS.get("mir").accepts(42)


# --- load_model ---------------------------------------------------------------------------------


def _kernel() -> dict:
    def t(name, shape):
        return {"tensor_name": name, "shape": shape, "data_type": "float32", "format": "DefaultFormat"}

    return {"composite": True, "op": "Fused_Add_Exp", "process": "cpu",
            "input_desc": [[t("a", [2, 3])], [t("b", [3])]],
            "op_desc": [{"name": "Add", "attr": None, "input_desc": [[t("a", [2, 3])], [t("b", [3])]],
                         "output_desc": [t("s", [2, 3])]},
                        {"name": "Exp", "attr": None, "input_desc": [[t("s", [2, 3])]],
                         "output_desc": [t("e", [2, 3])]}],
            "output_desc": [t("e", [2, 3])]}


def test_composite_dict_gives_the_graph_of_its_file(tmp_path):
    desc = _kernel()
    path = tmp_path / "kernel.info"
    path.write_text(json.dumps(desc))
    from_file, in_memory = load_model(path), load_model(desc)
    assert in_memory == from_file  # named by the kernel's "op" either way
    assert in_memory.name == "Fused_Add_Exp"
    assert [n.op for n in in_memory.nodes] == ["add", "exp"]
    assert [v.name for v in in_memory.inputs] == ["a", "b"] and [v.name for v in in_memory.outputs] == ["e"]


def test_in_memory_errors_name_the_kind_of_model():
    with pytest.raises(ImportFormatError, match=r"^<akg_json>: not an AKG composite kernel: missing key 'op_desc'"):
        load_model({"foo": 1})
    with pytest.raises(ImportFormatError, match=r"^<mindir>: not a MindIR model"):
        load_model(b"\xff\xff\xff")


@needs_mindir
@pytest.mark.parametrize("name", ["add", "mlp"])
def test_mindir_bytes_and_model_proto_give_the_graph_of_the_file(name):
    from akg.graph.io import _mind_ir_pb2 as pb

    path = MINDIR_CORPUS / f"{name}.mindir"
    from_file = load_model(path)
    data = path.read_bytes()
    model = pb.ModelProto()
    model.ParseFromString(data)
    for obj in (data, bytearray(data), model):
        g = load_model(obj)
        assert g.name == "mindir" and from_file.name == name
        assert same_graph(g, from_file)
    assert [n.op for n in load_model(model).nodes] == [n.op for n in from_file.nodes]


def test_mir_text_gives_the_graph_of_the_file(tmp_path):
    b = GraphBuilder("small")
    x = b.input("x", [2, 3])
    b.output(b.relu(b.add(x, b.const(np.arange(3, dtype=np.float32), name="bias"))))
    path = save_mir(b.build(), tmp_path / "small.mir")
    text = path.read_text()
    from_file = load_model(path)
    assert load_model(text) == from_file == load_model(str(path))
    assert [n.op for n in from_file.nodes] == ["add", "relu"]


def test_a_graph_passes_through():
    b = GraphBuilder("g")
    b.output(b.neg(b.input("x", [2])))
    g = b.build()
    assert load_model(g) is g


def test_unknown_suffix_lists_the_known_ones(tmp_path):
    with pytest.raises(ImportFormatError,
                       match=r"model\.pb: unknown model format '\.pb' \(known: \.info, \.json, \.mindir, \.mir, \.onnx, \.pt2\)"):
        load_model(tmp_path / "model.pb")
    with pytest.raises(ImportFormatError, match=r"missing\.mir: no such file"):
        load_model(str(tmp_path / "missing.mir"))


def test_unknown_object_lists_the_frontends():
    with pytest.raises(ImportFormatError) as info:
        load_model(42)
    message = str(info.value)
    assert message.startswith("cannot import a int: no frontend takes it (known: akg_json (")
    assert "mindir (the bytes of a .mindir file or a parsed ModelProto)" in message
    assert "mir (a str of .mir text)" in message
    assert "onnx (an onnx.ModelProto); " in message
    assert message.endswith("torch (a torch.fx.GraphModule of ATen ops, or (nn.Module, example inputs)))")


# --- the shared parts ---------------------------------------------------------------------------


def test_names_are_sanitised_and_made_unique():
    assert sanitize_name("a/b:0") == "a_b_0" and sanitize_name(".x") == "_.x" and sanitize_name("") == "_"
    used = {"x"}
    assert [unique_name(n, used) for n in ("x", "x", "y", "a b")] == ["x.1", "x.2", "y", "a_b"]
    assert used == {"x", "x.1", "x.2", "y", "a_b"}


def test_graph_names_and_unreadable_files(tmp_path):
    assert graph_name_of("/m/lenet 5.mindir", "<mindir>", "mindir") == "lenet_5"
    assert graph_name_of("<mindir>", "<mindir>", "mindir") == "mindir"
    bad = tmp_path / "bad.info"
    bad.write_bytes(b"\xff\xfe{")
    assert read_model_file(bad, text=False) == b"\xff\xfe{"
    with pytest.raises(ImportFormatError, match=r"bad\.info: not a text file \(bad UTF-8\)$"):
        read_model_file(bad, text=True)
    with pytest.raises(ImportFormatError, match=r"gone\.mindir: cannot read file: No such file"):
        read_model_file(tmp_path / "gone.mindir", text=False)


def test_op_context_expect_and_failures():
    ctx = OpContext(None, "Frob", {"k": None, "axis": 2}, [1, 2], "out", "op 3 (Frob)")
    ctx.expect(1, 2)
    with pytest.raises(ImportFail, match=r"^op 3 \(Frob\): takes 3 to 4 inputs, got 2$"):
        ctx.expect(3, 4)
    with pytest.raises(ImportFail, match=r"^op 3 \(Frob\): takes 1 inputs, got 2$"):
        ctx.expect(1)
    assert ctx.attr("k", "axis") == 2 and ctx.attr("k", default=7) == 7
    other = ctx.with_args([5])
    assert other.args == [5] and ctx.args == [1, 2] and other.where == ctx.where
    fail, unsupported = ctx.fail("bad"), ctx.unsupported("not modelled")
    assert (str(fail), fail.unsupported) == ("op 3 (Frob): bad", False)
    assert (str(unsupported), unsupported.unsupported) == ("not modelled", True)

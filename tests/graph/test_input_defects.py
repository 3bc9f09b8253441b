"""Input defects of issue 16 and those the fuzz tests (tests/graph/io/test_fuzz.py) found, each
replayed: a typed error with its exit code (file:line where the input is text) or the right
result, never an internal error.

* memory: a batch of 10^12 or 2^63, a constant too large to hold, checked before allocating;
* a NaN scalar constant compiled for cpu (and through an .akgpack);
* a literal nested 100000 deep (the .mir parser is recursion-free);
* a cyclic composite JSON graph, reported as a cycle;
* index inputs (embeddings) drawn within their bounds through reshapes and casts, tuned and
  compiled end to end;
* what the fuzzer found in the parsers and importers.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import akg
from akg.cli import main
from akg.errors import AttrError, ImportFormatError, InputDataError, MirParseError, TooLargeError
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.interpreter import index_bounds
from akg.graph.io import parse_akg_json, parse_mindir, parse_mir
from akg.graph.io import _mind_ir_pb2 as pb
from akg.graph.io.akg_json import loads_akg_json
from akg.graph.memory import format_bytes, memory_limit
from akg.graph.pipeline import plan_model
from akg.graph.types import TensorType

# --- running the command line ----------------------------------------------------------------


def cli(capsys, *args) -> tuple[int, str]:
    """(exit code, stderr) of `akg args...`."""
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


# --- memory: checked before anything is allocated --------------------------------------------------

BIG = """\
graph @big(%x: f32[{n},784]) {{
  %y = relu(%x) : f32[{n},784]
  return %y
}}
"""


def test_batch_of_10_to_the_12_needs_2_8_pib(tmp_path, capsys):
    path = tmp_path / "big.mir"
    path.write_text(BIG.format(n=10**12))
    graph = akg.graph.io.load_mir(path)  # a valid graph: it can be shown ...
    assert graph.inputs[0].type.nbytes == 10**12 * 784 * 4  # exact, no int64 wrap-around
    with pytest.raises(TooLargeError, match=r"graph 'big' needs 2\.8 PiB for its inputs"):
        random_inputs(graph)
    with pytest.raises(TooLargeError, match=r"model 'big' needs 5\.6 PiB to run"):
        plan_model(graph)  # ... but not compiled, tuned or run here
    assert cli(capsys, "show", path)[0] == 0
    db = f"sqlite:///{tmp_path / 'tune.db'}"
    for args in (["run", path], ["run", path, "--target", "cpu"], ["compile", path, "-o", tmp_path / "big.akgpack"],
                 ["tune", path, "--trials", "2", "--db", db]):
        code, err = cli(capsys, *args)
        assert code == TooLargeError.exit_code == 3, (args, err)
        assert "needs 2.8 PiB" in one_line_error(err) or "needs 5.6 PiB" in err, err


def test_dimension_of_2_to_the_63_is_a_located_parse_error(tmp_path, capsys):
    path = tmp_path / "big63.mir"
    path.write_text(BIG.format(n=2**63))
    with pytest.raises(MirParseError, match=r"big63\.mir:1:20: dimension 9223372036854775808 is larger than an "
                                            r"array can index"):
        akg.graph.io.load_mir(path)
    code, err = cli(capsys, "run", path)
    assert code == 3 and f"{path}:1:20:" in one_line_error(err)
    with pytest.raises(MirParseError, match=r"t\.mir:1:16: shape \[4294967296,4294967296\]: its "
                                            r"18446744073709551616 elements are more"):
        parse_mir(BIG.replace("{n},784", "4294967296,4294967296").format(), "t.mir")
    with pytest.raises(MirParseError, match=r"dimension 9{20} is larger"):
        parse_mir(BIG.format(n="9" * 20), "t.mir")
    with pytest.raises(MirParseError, match=r"dimension 9{20}\.\.\. is larger"):
        parse_mir(BIG.format(n="9" * 5000), "t.mir")


def test_tensor_types_count_exactly_and_refuse_what_no_array_holds():
    assert TensorType((2**61, 3), "f32").size == 3 * 2**61
    assert TensorType((2**61, 3), "f32").nbytes == 3 * 2**63  # beyond int64: exact all the same
    assert TensorType((0, 2**63 - 1), "f32").size == 0
    with pytest.raises(akg.errors.ShapeError, match="larger than an array can index"):
        TensorType((2**63,), "f32")
    with pytest.raises(akg.errors.ShapeError, match="elements are more than an array can index"):
        TensorType((2**32, 2**32), "f32")


def test_a_constant_too_large_to_hold_is_located_before_it_is_made(capsys, tmp_path):
    path = tmp_path / "bigw.mir"
    path.write_text("graph @bigw(%x: f32[2,4]) {\n  %c: f32[1000000000000,4] = const 0.5\n"
                    "  %y = add(%x, %c) : f32[1000000000000,4]\n  return %y\n}\n")
    with pytest.raises(TooLargeError, match=r"bigw\.mir:2:3: constant f32\[1000000000000,4\] needs 14\.6 TiB"):
        akg.graph.io.load_mir(path)
    code, err = cli(capsys, "show", path)
    assert code == 3 and "needs 14.6 TiB" in one_line_error(err)


def test_memory_limit_guards_every_allocator(monkeypatch):
    monkeypatch.setenv("AKG_MEMORY_LIMIT", "1M")
    assert memory_limit() == 2**20
    b = GraphBuilder("m")
    x = b.input("x", (512, 1024))  # 2 MiB of f32
    b.output(b.relu(x))
    graph = b.build()
    with pytest.raises(TooLargeError, match=r"graph 'm' needs 2\.0 MiB for its inputs \(%x: f32\[512,1024\]\), "
                                            r"more than AKG_MEMORY_LIMIT \(1\.0 MiB\)"):
        random_inputs(graph)
    with pytest.raises(TooLargeError, match="needs 2.0 MiB to evaluate"):
        evaluate(graph, {"x": np.zeros((512, 1024), np.float32)})
    with pytest.raises(TooLargeError, match="model 'm' needs 4.0 MiB to run"):
        plan_model(graph)
    with pytest.raises(TooLargeError, match="constant f32"):
        parse_mir("graph @c(%x: f32[2]) {\n  %c: f32[512,1024] = const 1.0\n  return %x\n}\n")
    monkeypatch.setenv("AKG_MEMORY_LIMIT", "16G")
    assert len(random_inputs(graph)) == 1


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1023, 1536, 3 * 2**40, 10**12 * 784 * 4)] == [
        "0 B", "1023 B", "1.5 KiB", "3.0 TiB", "2.8 PiB"]
    assert format_bytes(2**200) == "more than 1024 YiB"


# --- a NaN scalar constant, compiled ----------------------------------------------------------------

NAN_MIR = """\
graph @nan(%x: f32[4,8]) {
  %c: f32[] = const nan
  %y = add(%x, %c) : f32[4,8]
  return %y
}
"""


def test_nan_scalar_constant_compiles_for_cpu_and_gives_nan(tmp_path):
    from akg.graph.compute.lower import kernel_params, lower_graph
    from akg.runtime import CompiledModel

    graph = parse_mir(NAN_MIR)
    assert kernel_params(graph) == [] and not lower_graph(graph).params  # folded like any scalar
    x = np.ones((4, 8), np.float32)
    compiled = akg.compile_model(graph)
    (y,) = compiled(x=x)
    assert y.shape == (4, 8) and np.isnan(y).all()
    path = compiled.save(tmp_path / "nan.akgpack")
    (again,) = CompiledModel.load(path)(x=x)
    assert np.isnan(again).all()
    kernel = akg.build(graph)
    assert np.isnan(kernel(x=x)[0]).all()


def test_uniform_nan_constants_are_one_workload_value():
    from akg.graph.subgraph import canonical_form

    b = GraphBuilder("n")
    x = b.input("x", (4,))
    b.output(b.add(x, b.const(np.full((4,), np.nan, np.float32))))
    graph = b.build()
    from akg.graph.compute.lower import lower_graph

    assert not lower_graph(graph).params
    assert canonical_form(graph)["constants"][0][2] == "nan"  # the key holds the folded value
    assert np.isnan(akg.build(graph)(x=np.zeros(4, np.float32))[0]).all()


def test_nan_through_cli_run_and_akgpack(tmp_path, capsys):
    path = tmp_path / "nan.mir"
    path.write_text(NAN_MIR)
    assert main(["run", str(path), "--target", "cpu"]) == 0
    pack = tmp_path / "nan.akgpack"
    assert main(["compile", str(path), "-o", str(pack)]) == 0
    assert main(["run", str(pack)]) == 0
    assert "internal error" not in capsys.readouterr().err


# --- deep literals: no recursion -------------------------------------------------------------------


def _const(literal: str, type_: str = "f32[2]") -> str:
    return f"graph @g(%x: f32[2]) {{\n  %c: {type_} = const {literal}\n  %y = add(%x, %c) : f32[2]\n  return %y\n}}\n"


def test_literal_nested_100000_deep_is_a_located_error(capsys, tmp_path):
    deep = "[" * 100_000 + "1.0" + "]" * 100_000
    with pytest.raises(MirParseError, match=r"deep\.mir:2:22: bad constant for %c: literal is nested deeper "
                                            r"than the rank 1 of f32\[2\]"):
        parse_mir(_const(deep), "deep.mir")
    with pytest.raises(MirParseError, match=r"deep\.mir:3:3: expected ',' between list items or '\]'"):
        parse_mir(_const("[" * 100_000 + "1.0"), "deep.mir")
    with pytest.raises(MirParseError, match=r"deep\.mir:2:100021: this '\[' is not closed before the end of the file"):
        parse_mir("graph @g(%x: f32[2]) {\n  %c: f32[2] = const " + "[" * 100_000, "deep.mir")
    with pytest.raises(AttrError, match=r"deep\.mir:3:8: op 'transpose': attribute 'perm' expects a list of "
                                        r"integers, got \[\[\[\[\.\.\.\]\]\]\]"):
        parse_mir("graph @g(%x: f32[2,3]) {\n  %c: f32[2] = const 1.0\n  %y = transpose(%x) {perm="
                  + "[" * 100_000 + "]" * 100_000 + "} : f32[3,2]\n  return %y\n}\n", "deep.mir")
    path = tmp_path / "deep.mir"
    path.write_text(_const(deep))
    code, err = cli(capsys, "run", path)
    assert code == MirParseError.exit_code == 3 and f"{path}:2:22:" in one_line_error(err)


def test_nested_literals_still_parse():
    g = parse_mir("graph @g(%x: f32[2,2,1]) {\n  %c: f32[2,2,1] = const [[[1], [2]], [[3], [4],],]\n"
                  "  %e: f32[0] = const []\n  %y = add(%x, %c) : f32[2,2,1]\n  return %y, %e\n}\n")
    assert g.constants[g.value("c")].ravel().tolist() == [1, 2, 3, 4]
    with pytest.raises(MirParseError, match="ragged list literal"):
        parse_mir(_const("[[1.0], 2.0]", "f32[2,1]"))
    with pytest.raises(MirParseError, match=r"literal has shape \[3\], the type says \[2\]"):
        parse_mir(_const("[1.0, 2.0, 3.0]"))


# --- composite JSON: a cycle is reported as one ----------------------------------------------------


def _t(name, shape=(4,)):
    return {"data_type": "float32", "format": "DefaultFormat", "shape": list(shape), "tensor_name": name}


def _op(name, ins, out):
    return {"name": name, "attr": None, "input_desc": [[_t(i)] for i in ins], "output_desc": [_t(out)]}


def _kernel(ops, out="t2"):
    return {"composite": True, "op": "Fused_Cycle", "process": "cpu", "input_desc": [[_t("x")]],
            "op_desc": ops, "output_desc": [_t(out)]}


def test_cyclic_composite_json_names_the_cycle():
    desc = _kernel([_op("Add", ["x", "t2"], "t0"), _op("Mul", ["t0", "x"], "t1"), _op("Neg", ["t1"], "t2")])
    with pytest.raises(ImportFormatError) as e:
        parse_akg_json(desc, "cycle.info")
    assert str(e.value) == (
        "cycle.info: op_desc[0] (Add) -> t0: the ops form a cycle: op_desc[0] (Add) reads 't2' from "
        "op_desc[2] (Neg), which reads 't1' from op_desc[1] (Mul), which reads 't0' from op_desc[0] (Add)")
    with pytest.raises(ImportFormatError, match=r"op_desc\[0\] \(Add\) reads 't0', its own output"):
        parse_akg_json(_kernel([_op("Add", ["x", "t0"], "t0"), _op("Neg", ["t0"], "t2")]), "self.info")


def test_composite_json_out_of_order_and_undefined_tensors():
    with pytest.raises(ImportFormatError, match=r"tensor 't1' is used before it is defined: op_desc\[1\] \(Neg\) "
                                                r"computes it later"):
        parse_akg_json(_kernel([_op("Neg", ["t1"], "t2"), _op("Neg", ["x"], "t1")]), "order.info")
    with pytest.raises(ImportFormatError, match="tensor 'zz' is used before it is defined .not a kernel input, "
                                                "nor the output of any op"):
        parse_akg_json(_kernel([_op("Neg", ["zz"], "t2")]), "undefined.info")


def test_cyclic_composite_json_from_the_cli(tmp_path, capsys):
    path = tmp_path / "cycle.info"
    path.write_text(json.dumps(_kernel([_op("Add", ["x", "t1"], "t0"), _op("Neg", ["t0"], "t1"),
                                        _op("Neg", ["t1"], "t2")])))
    code, err = cli(capsys, "show", path)
    assert code == ImportFormatError.exit_code and "the ops form a cycle" in one_line_error(err)


# --- index inputs: random data within their bounds ---------------------------------------------------

EMBEDDING = """\
graph @embed(%ids: i32[2,8], %types: i64[2,8], %x: f32[16,32]) {
  %word: f32[1000,32] = const 0.5
  %type_table: f32[2,32] = const 0.25
  %flat = reshape(%ids) {shape=[16]} : i32[16]
  %e = gather(%word, %flat) : f32[16,32]
  %t32 = cast(%types) {to="i32"} : i32[2,8]
  %tt = transpose(%t32) {perm=[1, 0]} : i32[8,2]
  %tflat = reshape(%tt) {shape=[16]} : i32[16]
  %te = gather(%type_table, %tflat) : f32[16,32]
  %s = add(%e, %te) : f32[16,32]
  %h = add(%s, %x) : f32[16,32]
  %w: f32[32,32] = const 0.125
  %m = matmul(%h, %w) : f32[16,32]
  return %m
}
"""


def test_index_bounds_reach_the_inputs_through_reshapes_casts_and_transposes():
    graph = parse_mir(EMBEDDING)
    bounds = {v.name: b for v, b in index_bounds(graph).items() if v in graph.inputs}
    assert bounds == {"ids": 1000, "types": 2}
    inputs = random_inputs(graph, seed=3)
    assert 0 <= inputs["ids"].min() and inputs["ids"].max() < 1000
    assert set(np.unique(inputs["types"])) <= {0, 1}
    evaluate(graph, inputs)  # no "gather index out of range"


def test_sufficient_bounds_go_through_slices_but_checked_ones_do_not():
    b = GraphBuilder("sl")
    ids = b.input("ids", (10,), "int64")
    head = b.op("slice", ids, begin=[0], end=[4])
    b.output(b.op("gather", b.const(np.ones((7, 3), np.float32)), head))
    graph = b.build()
    assert index_bounds(graph).get(graph.inputs[0]) is None  # values sliced away are not checked
    assert index_bounds(graph, sufficient=True)[graph.inputs[0]] == 7
    assert random_inputs(graph)["ids"].max() < 7


def test_bounds_fit_the_dtype_and_floats_cast_to_indices():
    from akg.graph.interpreter import random_array

    rng = np.random.default_rng(0)
    small = random_array(TensorType((1000,), "int8"), rng, 1000)  # a bound beyond int8: cut to 128
    assert small.dtype == np.int8 and small.min() >= 0
    floats = random_array(TensorType((50,), "f32"), rng, 5)
    assert floats.dtype == np.float32 and set(np.unique(floats)) <= {0, 1, 2, 3, 4}
    assert not random_array(TensorType((3,), "i32"), rng, 0).any()  # an empty axis: nothing is in range


def test_compiled_model_respects_the_same_bounds():
    graph = parse_mir(EMBEDDING)
    compiled = akg.compile_model(graph)
    assert compiled.index_bounds == {"ids": 1000, "types": 2}
    inputs = compiled.random_inputs(1)
    (got,) = compiled(**inputs)
    np.testing.assert_allclose(got, evaluate(graph, inputs)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(InputDataError, match=r"input ids holds indices outside \[0, 1000\)"):
        compiled(**{**inputs, "ids": np.full((2, 8), 1000, np.int32)})


def test_embedding_model_tunes_then_compiles(tmp_path):
    from akg.db import open_database

    graph = parse_mir(EMBEDDING)
    db = open_database(f"sqlite:///{tmp_path / 'tune.db'}")
    result = akg.tune(graph, trials=4, db=db)
    assert result.new_measurements == 4
    assert sum(k.failures for k in result.kernels) == 0, [k for k in result.kernels]
    records = db.records()
    assert records and all(str(r.status).lower().endswith("ok") for r in records), \
        [(r.status, r.error) for r in records]
    compiled = akg.compile_model(graph, db=db)
    # every kernel's config is the database's choice: the tuned one, or the default where it won
    # the final comparison (a loaded host can make either win; both came from the database)
    sources = [k.source for k in compiled.kernels.values()]
    assert sources and all(s.startswith("tuned") or s.startswith("default (") for s in sources), sources
    inputs = compiled.random_inputs(0)
    np.testing.assert_allclose(compiled(**inputs)[0], evaluate(graph, inputs)[0], rtol=1e-5, atol=1e-5)


def test_embedding_model_tunes_then_compiles_from_the_cli(tmp_path, capsys):
    path, pack = tmp_path / "embed.mir", tmp_path / "embed.akgpack"
    path.write_text(EMBEDDING)
    db = f"sqlite:///{tmp_path / 'tune.db'}"
    code, err = cli(capsys, "tune", path, "--trials", "4", "--db", db)
    assert code == 0 and "gather index out of range" not in err, err
    assert cli(capsys, "compile", path, "--db", db, "-o", pack)[0] == 0
    code, err = cli(capsys, "run", pack)
    assert code == 0, err


# --- what the fuzzer found ----------------------------------------------------------------------


def test_fuzz_found_int_attribute_beyond_64_bits():
    # reshape {shape=18446744073709551616}: numpy's int64 product raised OverflowError
    text = ("graph @g(%x: f32[4]) {\n  %y = reshape(%x) {shape=18446744073709551616} : f32[4]\n"
            "  return %y\n}\n")
    with pytest.raises(AttrError, match=r"t\.mir:2:8: op 'reshape': attribute 'shape' expects integers of at "
                                        r"most 64 bits"):
        parse_mir(text, "t.mir")
    with pytest.raises(AttrError, match="attribute 'axis' expects an integer of at most 64 bits"):
        parse_mir(text.replace("reshape(%x) {shape=18446744073709551616}", f"softmax(%x) {{axis={2**70}}}"))
    with pytest.raises(AttrError, match="a number within the float64 range"):
        parse_mir("graph @g(%x: f32[4]) {\n  %y = pad(%x) {before=[0], after=[0], value=" + "9" * 400
                  + "} : f32[4]\n  return %y\n}\n")


def test_fuzz_found_deep_attribute_repr():
    # a 20000-deep list in an attribute: the error message's repr() recursed
    with pytest.raises(AttrError, match=r"expects a list of integers, got \[\[\[\[\.\.\.\]\]\]\]"):
        parse_mir("graph @g(%x: f32[2,3]) {\n  %y = transpose(%x) {perm=" + "[" * 20_000 + "1" + "]" * 20_000
                  + "} : f32[3,2]\n  return %y\n}\n")


def test_fuzz_found_long_integer_literal():
    with pytest.raises(MirParseError, match=r":2:21: integer with 5001 digits is too long"):
        parse_mir("graph @g(%x: f32[2]) {\n  %c: i32[] = const 1" + "0" * 5000 + "\n  return %x\n}\n")


def test_fuzz_found_mindir_string_field_with_invalid_utf8(corpus):
    model = pb.ModelProto()
    model.ParseFromString((corpus / "mindir" / "relu.mindir").read_bytes())
    model.graph.name = "Q" * 40
    data = model.SerializeToString()
    assert data.count(b"Q" * 40) == 1
    broken = data.replace(b"Q" * 40, b"\x80" + b"Q" * 39)  # the same length: still a valid protobuf
    with pytest.raises(ImportFormatError, match=r"relu\.mindir: malformed MindIR: model\.graph\.name holds bytes "
                                                "that are not UTF-8 text"):
        parse_mindir(broken, "relu.mindir")


def test_fuzz_found_composite_json_nan_and_out_of_range_integer_constants():
    def kernel_with(value, dtype="int32"):
        c = {**_t("c", (2,)), "data_type": dtype, "value": value}
        x = {**_t("x", (2,)), "data_type": dtype}
        y = {**_t("y", (2,)), "data_type": dtype}
        return {"composite": True, "op": "Fused_C", "process": "cpu", "input_desc": [[x]],
                "op_desc": [{"name": "Add", "attr": None, "input_desc": [[x], [c]], "output_desc": [y]}],
                "output_desc": [y]}

    for value in (math.nan, [1.5, 2.0], 2**40, [math.inf, 1]):
        with pytest.raises(ImportFormatError, match=r"constant value .* is not a number or list of numbers of "
                                                    r"type int32"):
            parse_akg_json(kernel_with(value), "c.info")
    g = parse_akg_json(kernel_with([1.0, 2.0]), "c.info")  # whole numbers are fine
    assert g.constants[next(iter(g.constants))].tolist() == [1, 2]
    assert np.isnan(next(iter(parse_akg_json(kernel_with(math.nan, "float32"), "c.info").constants.values()))).all()


def test_fuzz_found_composite_json_text_too_deep_or_too_long():
    with pytest.raises(ImportFormatError, match=r"d\.json: invalid JSON: lists and objects nested 100000 deep "
                                                r"\(at line 1 column 100000\)"):
        loads_akg_json("[" * 100_000, "d.json")
    with pytest.raises(ImportFormatError, match="d.json: invalid JSON: a number with more than 4300 digits"):
        loads_akg_json('{"op_desc": 1' + "0" * 5000 + "}", "d.json")
    with pytest.raises(ImportFormatError, match=r"d\.json:2:1: invalid JSON"):
        loads_akg_json('{"op_desc": [\n', "d.json")


def test_fuzz_found_composite_json_values_nested_too_deep_for_repr():
    # a constant value nested 100000 deep: the error message's repr() recursed
    deep = 1.0
    for _ in range(100_000):
        deep = [deep]
    c = {**_t("c", (4,)), "value": deep}
    desc = {**_kernel([{"name": "Add", "attr": None, "input_desc": [[_t("x")], [c]], "output_desc": [_t("t2")]}])}
    with pytest.raises(ImportFormatError, match=r"constant value \[\[\[\[\.\.\.\]\]\]\] is not a number"):
        parse_akg_json(desc, "deep.info")


def test_mindir_external_data_longer_than_its_file_is_not_read(corpus, tmp_path):
    # a damaged length (2^62) made f.read() try to allocate it
    model = pb.ModelProto()
    model.ParseFromString((corpus / "mindir" / "mlp.mindir").read_bytes())
    p = model.graph.parameter[0]
    (tmp_path / "weights.bin").write_bytes(p.raw_data)
    p.ClearField("raw_data")
    p.external_data.location, p.external_data.offset = "weights.bin", 0
    p.external_data.length = len((tmp_path / "weights.bin").read_bytes())
    assert parse_mindir(model.SerializeToString(), "mlp.mindir", tmp_path) is not None  # the intact file reads
    for offset, length in ((0, 2**62), (2**40, 4), (-1, 4)):
        p.external_data.offset, p.external_data.length = offset, length
        with pytest.raises(ImportFormatError, match=r"external data .*weights\.bin is shorter than offset \+ length"):
            parse_mindir(model.SerializeToString(), "mlp.mindir", tmp_path)

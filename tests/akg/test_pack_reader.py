""".akgpack files that are damaged or altered: `CompiledModel.load` checks the manifest against
itself, its weights and its kernel files, and a defect only the kernels reveal (a spec that
disagrees with what a compiled kernel takes) stops the first call; each is an
ImportFormatError naming the pack and what is wrong (`akg run` exits 3), never an internal
error or a mislabelled result."""

import io
import json
import re
import zipfile

import numpy as np
import pytest

from akg.api import compile_model
from akg.cli import main
from akg.errors import ImportFormatError
from akg.graph import GraphBuilder
from akg.runtime import CompiledModel


@pytest.fixture(scope="module")
def small():
    """Three kernels with a weight each, two intermediates in the memory plan, a constant
    output: x -> k0 -> '1' -> k1 -> '3' -> k2 (+x) -> '5', and 'c'."""
    b = GraphBuilder("small")
    x = b.input("x", (4, 8))
    w = b.const(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), name="w")
    h1 = b.relu(b.matmul(x, w))
    h2 = b.exp(b.matmul(h1, w))
    b.output(b.add(b.matmul(h2, w), x), b.const(np.arange(4, dtype=np.float32), name="c"))
    graph = b.build()
    model = compile_model(graph)
    model.reference = graph
    return model


@pytest.fixture(scope="module")
def pack(small, tmp_path_factory):
    path = small.save(tmp_path_factory.mktemp("pack") / "small.akgpack")
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    # the structure the cases below alter
    assert [(c["inputs"], c["outputs"], c["params"]) for c in manifest["calls"]] == [
        (["x"], ["1"], 1), (["1"], ["3"], 1), (["3", "x"], ["5"], 1)]
    assert manifest["plan"]["slot_of"] == {"1": 0, "3": 1} and manifest["plan"]["slot_bytes"] == [128, 128]
    assert [s["name"] for s in manifest["outputs"]] == ["5", "c"]
    return path


def _files(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _kernel(path, call: int = 0) -> str:
    return json.loads(_files(path)["manifest.json"])["calls"][call]["kernel"]


def _repack(src, dst, edit=None, replace=None, drop=()):
    """A copy of pack `src` at `dst`: its manifest changed by `edit(manifest)`, members replaced
    (name -> bytes) or dropped; a well-formed zip (right CRCs) around the altered contents."""
    files = _files(src)
    if edit is not None:
        manifest = json.loads(files["manifest.json"])
        changed = edit(manifest)  # in place, or a whole new manifest
        manifest = manifest if changed is None else changed
        files["manifest.json"] = json.dumps(manifest).encode()
    files.update(replace or {})
    for name in drop:
        del files[name]
    with zipfile.ZipFile(dst, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return dst


def _set(*path_and_value):
    *path, value = path_and_value

    def edit(m):
        for key in path[:-1]:
            m = m[key]
        m[path[-1]] = value

    return edit


def _rename_kernel(new):
    def edit(m):
        old = m["calls"][0]["kernel"]
        m["kernels"][new] = m["kernels"].pop(old)
        for c in m["calls"]:
            c["kernel"] = new if c["kernel"] == old else c["kernel"]

    return edit


def _swap_calls(m):
    m["calls"][0], m["calls"][1] = m["calls"][1], m["calls"][0]


def _twice(m):
    m["specs"].append(m["specs"][0])


MANIFEST_CASES = [
    ("manifest_list", lambda m: [], r"the manifest must be a JSON object, not \[\]"),
    ("version_99", _set("version", 99), "not an akgpack version 2"),
    ("version_true", _set("version", True), "not an akgpack version 2"),
    ("no_name", lambda m: m.pop("name") and None, "the manifest has no name"),
    ("calls_null", _set("calls", None), "the manifest's calls must be a list, not null"),
    ("call_not_object", _set("calls", 1, 7), r"the manifest's calls\[1\] must be an object, not 7"),
    ("inputs_str", _set("inputs", "x"), "the manifest's inputs must be a list, not \"x\""),
    ("call_inputs_str", _set("calls", 0, "inputs", "x"), r"calls\[0\]\.inputs must be a list of names, not \"x\""),
    ("params_str", _set("calls", 0, "params", "1"), r"calls\[0\]\.params must be a count, not \"1\""),
    ("index_bounds_list", _set("index_bounds", {"x": [0, 1]}),
     r"index_bounds must be an object of counts, not {\"x\": \[0, 1\]}"),
    ("kernel_info", lambda m: m["kernels"].update({k: "x" for k in m["kernels"]}),
     r"the manifest's kernels\.\w+ must be an object"),
    ("plan_slot_str", _set("plan", "slot_of", "1", "0"),
     r"plan\.slot_of must be an object of counts, not {\"1\": \"0\""),
    ("neg_shape", _set("inputs", 0, "shape", [-4, 8]), r"inputs\[0\]\.shape must be a list of sizes, not \[-4, 8\]"),
    ("float_shape", _set("inputs", 0, "shape", [4.5, 8]), r"inputs\[0\]\.shape must be a list of sizes"),
    ("huge_shape", _set("inputs", 0, "shape", [10**12, 10**12]), "has more elements than an array can index"),
    ("bad_dtype", _set("inputs", 0, "dtype", "floatX"), r"inputs\[0\]\.dtype 'floatX' is not a dtype akg knows"),
    ("spec_twice", _twice, "the manifest's specs list x twice"),
    # the manifest's parts disagree
    ("in_shape", _set("inputs", 0, "shape", [8, 4]),
     r"input x is float32\[8, 4\] in the manifest's inputs but float32\[4, 8\] in its specs"),
    ("in_shape_big", _set("inputs", 0, "shape", [300, 8]), r"input x is float32\[300, 8\]"),
    ("in_dtype", _set("inputs", 0, "dtype", "float64"),
     r"input x is float64\[4, 8\] in the manifest's inputs but float32\[4, 8\] in its specs"),
    ("in_unknown", _set("inputs", 0, "name", "q"), "input q has no entry in the manifest's specs"),
    ("out_shape", _set("outputs", 0, "shape", [4, 100]),
     r"output 5 is float32\[4, 100\] in the manifest's outputs but float32\[4, 8\] in its specs"),
    ("out_shape_small", _set("outputs", 0, "shape", [1, 1]), r"output 5 is float32\[1, 1\]"),
    ("spec_shape", lambda m: [s.update(shape=[1, 1]) for s in m["specs"] if s["name"] == "5"] and None,
     r"output 5 is float32\[4, 8\] in the manifest's outputs but float32\[1, 1\] in its specs"),
    ("call_kernel", _set("calls", 0, "kernel", "deadbeef"),
     r"call 0 \(small.k0_matmul_relu\) runs kernel 'deadbeef', which the manifest's kernels do not list"),
    ("call_kernel_path", _set("calls", 0, "kernel", "../../../etc/passwd"),
     r"runs kernel '../../../etc/passwd', which the manifest's kernels do not list"),
    ("kernel_key_path", _rename_kernel("../k"), "kernel key '../k' is not a plain name"),
    ("call_undefined", _set("calls", 1, "inputs", ["zz"]),
     r"call 1 \(small.k1_matmul_exp\) reads zz, which is no model input, constant or output of an earlier call"),
    ("calls_out_of_order", _swap_calls, r"call 0 \(small.k1_matmul_exp\) reads 1, which is no model input"),
    ("no_calls", _set("calls", []), "output 5 is no model input or constant, and no call computes it"),
    ("writes_input", _set("calls", 0, "outputs", ["x"]),
     r"call 0 \(small.k0_matmul_relu\) writes x, which is a model input"),
    ("writes_twice", _set("calls", 1, "outputs", ["1"]), "call 1 .* writes 1, which is written by call 0"),
    ("writes_unknown", _set("calls", 2, "outputs", ["zz"]), "writes zz, which has no entry in the manifest's specs"),
    ("params_count", _set("calls", 0, "params", 5),
     r"params/0.npz holds 1 weight array\(s\) \(p0\); call 0 \(small.k0_matmul_relu\) takes 5"),
    ("complex_not_pairs", _set("complex_io", ["x"]),
     r"complex_io names x, whose spec float32\[4, 8\] is not a complex64 array as float32 pairs"),
    ("complex_inner", _set("complex_io", ["1"]), "complex_io names 1, which is no model input or output"),
    ("bounds_inner", _set("index_bounds", {"1": 3}), "index_bounds name 1, which is not a model input"),
    ("plan_output", _set("plan", "slot_of", "5", 0), "memory plan places 5, which is a model output"),
    ("plan_unwritten", _set("plan", "slot_of", "x", 0), "memory plan places x, which is written by no call"),
    ("plan_slot_range", _set("plan", "slot_of", "1", 7), "memory plan places 1 in slot 7 of 2"),
    ("plan_slot_small", _set("plan", "slot_bytes", [64, 128]),
     r"memory plan places 1 \(float32\[4, 8\], 128 bytes\) in slot 0 of 64 bytes"),
    ("plan_overlap", _set("plan", "slot_of", "3", 0), "memory plan puts 1 and 3 in slot 0 while both are alive"),
]


@pytest.mark.parametrize("edit, message", [c[1:] for c in MANIFEST_CASES], ids=[c[0] for c in MANIFEST_CASES])
def test_an_altered_manifest_is_refused_at_load(pack, tmp_path, edit, message):
    bad = _repack(pack, tmp_path / "bad.akgpack", edit)
    with pytest.raises(ImportFormatError, match=message) as info:
        CompiledModel.load(bad)
    assert str(info.value).startswith(f"{bad}: ") and "\n" not in str(info.value)


def _flip(src, dst, member: bytes):
    """`src` with one byte of `member`'s stored data flipped: its CRC no longer matches."""
    data = bytearray(src.read_bytes())
    at = data.find(member) + len(member) // 2
    data[at] ^= 0xFF
    dst.write_bytes(bytes(data))
    return dst


def _damaged(case: str, pack, tmp_path):
    bad, files, key = tmp_path / "bad.akgpack", _files(pack), _kernel(pack)
    if case == "manifest_crc":
        return _flip(pack, bad, files["manifest.json"]), r"manifest.json is damaged \(Bad CRC-32"
    if case == "kernel_crc":
        return _flip(pack, bad, files[f"kernels/{key}"]), rf"kernels/{key} is damaged \(Bad CRC-32"
    if case == "no_manifest":
        return _repack(pack, bad, drop=["manifest.json"]), "manifest.json is missing"
    if case == "manifest_json":
        return _repack(pack, bad, replace={"manifest.json": b"{not json"}), "no readable manifest"
    if case == "manifest_binary":
        return _repack(pack, bad, replace={"manifest.json": b"\xff\xfe\x00"}), "no readable manifest"
    if case in ("kernel_junk", "kernel_empty"):
        junk = b"not an elf" if case == "kernel_junk" else b""
        return (_repack(pack, bad, replace={f"kernels/{key}": junk}),
                rf"kernel {key} cannot be loaded by the cpu-llvm-so backend \(.*Failed to load")
    if case == "kernel_missing":
        return _repack(pack, bad, drop=[f"kernels/{key}"]), rf"kernels/{key} is missing"
    if case == "params_missing":
        return (_repack(pack, bad, drop=["params/1.npz"]),
                r"params/1.npz is missing: call 1 \(small.k1_matmul_exp\) takes 1 weight array")
    if case == "params_renamed":
        return (_repack(pack, bad, replace={"params/1.npz": _npz(q0=np.zeros((8, 8), np.float32))}),
                r"params/1.npz holds 1 weight array\(s\) \(q0\); call 1 .* takes 1 \(p0..p0\)")
    if case == "params_junk":
        return _repack(pack, bad, replace={"params/2.npz": b"junk"}), r"params/2.npz is not a readable .npz"
    if case == "constants_npy":
        return (_repack(pack, bad, replace={"constants.npz": _npy(np.zeros(4, np.float32))}),
                r"constants.npz is not a readable .npz \(a single array")
    if case == "constant_shape":
        return (_repack(pack, bad, replace={"constants.npz": _npz(c=np.zeros(5, np.float32))}),
                r"constant c is float32\[5\] in constants.npz but float32\[4\] in the manifest's specs")
    if case == "constant_unknown":
        return (_repack(pack, bad, replace={"constants.npz": _npz(c=np.zeros(4, np.float32), zz=np.zeros(1))}),
                "constant zz in constants.npz has no entry in the manifest's specs")
    raise AssertionError(case)


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


DAMAGE_CASES = ["manifest_crc", "kernel_crc", "no_manifest", "manifest_json", "manifest_binary", "kernel_junk",
                "kernel_empty", "kernel_missing", "params_missing", "params_renamed", "params_junk", "constants_npy",
                "constant_shape", "constant_unknown"]


@pytest.mark.parametrize("case", DAMAGE_CASES)
def test_a_damaged_member_is_refused_at_load(pack, tmp_path, case):
    bad, message = _damaged(case, pack, tmp_path)
    with pytest.raises(ImportFormatError, match=message) as info:
        CompiledModel.load(bad)
    assert str(info.value).startswith(f"{bad}: ") and "\n" not in str(info.value)


def _consistent(*names_shapes_dtypes):
    """A manifest edit that changes a value's spec everywhere it is listed (inputs, outputs,
    specs): self-consistent, so only the compiled kernels can tell."""
    def edit(m):
        for name, shape, dtype in names_shapes_dtypes:
            for s in (*m["inputs"], *m["outputs"], *m["specs"]):
                if s["name"] == name:
                    s["shape"], s["dtype"] = shape, dtype

    return edit


KERNEL_CASES = [  # same bytes, so the memory plan still fits (TVM checks strides first on a view)
    ("intermediate", _consistent(("1", [8, 4], "float32")), "small.k0_matmul_relu", r"(Invalid|Mismatched) t1\."),
    ("output", _consistent(("5", [2, 16], "float32")), "small.k2_matmul_add", r"(Invalid|Mismatched) t5\."),
    ("input_dtype", _consistent(("x", [4, 8], "int32")), "small.k0_matmul_relu", r"Mismatched .*dtype"),
]


@pytest.mark.parametrize("how", ["driver", "named", "per_kernel"])
@pytest.mark.parametrize("edit, kernel, why", [c[1:] for c in KERNEL_CASES], ids=[c[0] for c in KERNEL_CASES])
def test_a_manifest_the_kernels_refuse_stops_the_first_call(pack, tmp_path, edit, kernel, why, how):
    bad = _repack(pack, tmp_path / "bad.akgpack", edit)
    model = CompiledModel.load(bad)  # self-consistent: loads
    model.use_driver = how != "per_kernel"
    inputs = model.random_inputs(0)
    message = rf"the pack's manifest disagrees with its kernel {kernel}: {why}"
    with pytest.raises(ImportFormatError, match=message) as info:
        model(inputs["x"]) if how == "driver" else model(**inputs)
    assert str(info.value).startswith(f"{bad}: ") and "\n" not in str(info.value)


def test_swapped_call_arguments_of_other_shapes_stop_the_first_call(pack, tmp_path):
    bad = _repack(pack, tmp_path / "bad.akgpack", _set("calls", 2, "inputs", ["x", "3"]))
    model = CompiledModel.load(bad)  # both are float32[4, 8]: the kernel cannot tell, the reference can
    assert np.isfinite(model(**model.random_inputs(0))[0]).all()
    bad = _repack(pack, tmp_path / "bad2.akgpack", _set("calls", 2, "inputs", ["3", "c"]))
    with pytest.raises(ImportFormatError, match=r"disagrees with its kernel small.k2_matmul_add: Mismatched x.ndim"):
        CompiledModel.load(bad)(**model.random_inputs(0))


def test_an_intact_pack_still_loads_and_matches(small, pack):
    loaded = CompiledModel.load(pack)
    inputs = small.random_inputs(1)
    for a, b in zip(small(**inputs), loaded(**inputs)):
        np.testing.assert_array_equal(a, b)


def test_a_version_1_pack_still_loads(small, pack, tmp_path):
    """Version 1: kernels/<key>.so, no artifact_kind (the CPU's libraries), complex_io or reference."""
    files = _files(pack)
    manifest = json.loads(files["manifest.json"])
    manifest["version"] = 1
    for key in ("artifact_kind", "complex_io", "reference"):
        del manifest[key]
    v1 = {n + ".so" if n.startswith("kernels/") else n: data for n, data in files.items()
          if not n.startswith("reference/")}
    v1["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(tmp_path / "v1.akgpack", "w") as z:
        for name, data in v1.items():
            z.writestr(name, data)
    loaded = CompiledModel.load(tmp_path / "v1.akgpack")
    inputs = small.random_inputs(2)
    for a, b in zip(small(**inputs), loaded(**inputs)):
        np.testing.assert_array_equal(a, b)


def test_a_model_without_kernels_is_not_linked(caplog):
    b = GraphBuilder("identity")
    b.output(b.input("x", (3,)))
    model = compile_model(b.build())
    assert model.calls == [] and model.driver() is None
    np.testing.assert_array_equal(model(np.arange(3, dtype=np.float32))[0], [0, 1, 2])
    assert "linking" not in caplog.text


def _cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", ["manifest_crc", "kernel_junk", "calls_null", "no_calls", "out_shape", "call_time"])
def test_akg_run_says_what_is_wrong_and_exits_3(capsys, pack, tmp_path, case):
    if case in ("manifest_crc", "kernel_junk"):
        bad, message = _damaged(case, pack, tmp_path)
    elif case == "call_time":
        bad = _repack(pack, tmp_path / "bad.akgpack", KERNEL_CASES[0][1])
        message = "the pack's manifest disagrees with its kernel small.k0_matmul_relu"
    else:
        _, edit, message = next(c for c in MANIFEST_CASES if c[0] == case)
        bad = _repack(pack, tmp_path / "bad.akgpack", edit)
    code, out, err = _cli(capsys, "run", bad, "--check")
    assert code == 3, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {bad}: ") and "internal error" not in line
    assert re.search(message, line), line
    assert "f32[4,100]" not in out  # nothing printed under a wrong shape


def test_akg_run_check_passes_for_an_intact_pack(capsys, pack):
    code, out, err = _cli(capsys, "run", pack, "--check")
    assert code == 0, err
    assert "check passed: 2 output(s)" in out


def test_bfloat16_constants_come_back_as_bfloat16(tmp_path):
    """NumPy writes ml_dtypes arrays into an .npz as raw bytes (|V2): the specs say what they are."""
    import ml_dtypes

    b = GraphBuilder("bf")
    c = b.const(np.arange(4).astype(ml_dtypes.bfloat16), name="c")
    b.output(b.add(b.input("x", (4,), "bfloat16"), c), c)
    loaded = CompiledModel.load(compile_model(b.build()).save(tmp_path / "bf.akgpack"))
    assert loaded.constants["c"].dtype == ml_dtypes.bfloat16
    got = loaded(x=np.ones(4, ml_dtypes.bfloat16))
    np.testing.assert_array_equal(np.asarray(got[0], np.float32), [1, 2, 3, 4])
    assert got[1].dtype == ml_dtypes.bfloat16


def test_a_damaged_reference_graph_is_an_import_error(pack, tmp_path):
    bad = _repack(pack, tmp_path / "bad.akgpack", replace={"reference/weights.npz": b"junk"})
    model = CompiledModel.load(bad)  # the pack runs without its reference
    with pytest.raises(ImportFormatError, match=r"reference/weights.npz is not a readable .npz"):
        model.reference_graph()
    bad = _flip(pack, tmp_path / "bad2.akgpack", _files(pack)["reference/model.mir"])
    with pytest.raises(ImportFormatError, match=r"reference/model.mir is damaged \(Bad CRC-32"):
        CompiledModel.load(bad).reference_graph()

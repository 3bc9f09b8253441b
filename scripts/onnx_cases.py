"""Generate the ONNX backend node-test cases from the installed `onnx` wheel, offline.

The wheel no longer ships its `backend/test/data` folder, but it still has the generators
(`onnx.backend.test.case.node`): each op's module builds its models and computes the expected
outputs with NumPy. This script runs them and writes the cases in the layout
`onnx.backend.test.loader.load_model_tests` reads:

    OUT/node/<case>/model.onnx
    OUT/node/<case>/test_data_set_<k>/input_<i>.pb, output_<j>.pb

and OUT/COMPLETE (the onnx version), written last, so an interrupted run is redone.

    python scripts/onnx_cases.py OUT [--op Relu]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from pathlib import Path

COMPLETE = "COMPLETE"


def _tensor_bytes(value, value_info) -> bytes:
    """One input or output of a data set as the protobuf the loader reads, by its declared kind."""
    from onnx import TensorProto, numpy_helper

    kind = value_info.type.WhichOneof("value")
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    if kind == "sequence_type":
        return numpy_helper.from_list(value, value_info.name).SerializeToString()
    if kind == "optional_type":
        return numpy_helper.from_optional(value, value_info.name).SerializeToString()
    if kind == "map_type":
        return numpy_helper.from_dict(value, value_info.name).SerializeToString()
    return numpy_helper.from_array(value, value_info.name).SerializeToString()


def _write_case(case, folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(case.model.SerializeToString())
    graph = case.model.graph
    for k, (inputs, outputs) in enumerate(case.data_sets):
        data = folder / f"test_data_set_{k}"
        data.mkdir()
        for prefix, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for j, value in enumerate(values):
                (data / f"{prefix}_{j}.pb").write_bytes(_tensor_bytes(value, infos[j]))


def installed_version() -> str:
    import onnx

    return onnx.__version__


def is_complete(out: Path) -> bool:
    """Whether `out` holds a finished generation made with the installed onnx."""
    stamp = out / COMPLETE
    return stamp.exists() and stamp.read_text().strip() == installed_version()


def generate(out: Path, op_type: str | None = None) -> int:
    """Write the node cases (of one op, or all) under `out`; the number written. A case whose
    data cannot be serialised (a map of strings, say) is written without it and counted."""
    from onnx.backend.test.case import node

    out = Path(out)
    (out / COMPLETE).unlink(missing_ok=True)
    with warnings.catch_warnings():  # the generators' own overflow warnings (Cast to float8 ...)
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(op_type)
    written = 0
    for case in cases:
        if case.model is None or not case.data_sets:
            continue
        _write_case(case, out / "node" / case.name)
        written += 1
    if op_type is None:
        (out / COMPLETE).write_text(installed_version() + "\n")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write (OUT/node/<case>/...)")
    parser.add_argument("--op", default=None, help="only this op's cases (e.g. Relu)")
    args = parser.parse_args(argv)
    n = generate(args.out, args.op)
    print(f"wrote {n} node cases under {args.out / 'node'} (onnx {installed_version()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Software prefetch spread over a row's passes: every line of every stream is prefetched once
per iteration of the loop that streams the rows, whatever the pass's length against the
stream's lines (AVX2's 8 lanes give a 1024-column row 128 vectors and 64 lines)."""

import numpy as np
import pytest
import tvm
from tvm import tirx

from akg.polyhedral.prefetch import Stream, spread


def _counted(lines: dict[str, int], vectors: int, lanes: int = 8):
    """A pass of `vectors` vector iterations over a row of `vectors * lanes` floats, with the
    streams' prefetches spread over it; each prefetch counts its line instead of fetching
    it. Returns (the function's TIR, counts per stream: how often each line was named)."""
    row = tirx.decl_buffer((vectors * lanes,), "float32", "row")
    out = tirx.decl_buffer((vectors * lanes,), "float32", "out")
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    body = tirx.For(i, 0, vectors, tirx.ForKind.SERIAL, tirx.For(
        j, 0, lanes, tirx.ForKind.VECTORIZED,
        tirx.BufferStore(out, tirx.BufferLoad(row, [i * lanes + j]) * tirx.const(2.0, "float32"), [i * lanes + j])))
    per_line = 16
    sources = {name: tirx.decl_buffer((n * per_line,), "float32", name) for name, n in lines.items()}
    counts = {name: tirx.decl_buffer((n,), "int32", f"{name}_count") for name, n in lines.items()}
    streams = [Stream(sources[name], tirx.const(0, "int32"), n, per_line, view=sources[name])
               for name, n in lines.items()]

    def count(load) -> tirx.Stmt:
        counter = counts[str(load).split("[", 1)[0]]  # this TVM's load node does not expose its buffer
        line = tirx.floordiv(load.indices[0], per_line)
        return tirx.BufferStore(counter, tirx.BufferLoad(counter, [line]) + 1, [line])

    stmt = spread(body, streams, count)
    params = [row, out, *(counts[name] for name in lines)]
    func = tirx.PrimFunc(params, stmt).with_attr("global_symbol", "main")
    exe = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    dev = tvm.cpu()
    arrays = [tvm.runtime.tensor(np.ones(vectors * lanes, np.float32), dev),
              tvm.runtime.tensor(np.zeros(vectors * lanes, np.float32), dev),
              *(tvm.runtime.tensor(np.zeros(n, np.int32), dev) for n in lines.values())]
    exe["main"](*arrays)
    np.testing.assert_array_equal(arrays[1].numpy(), 2.0)
    return str(stmt), {name: a.numpy() for name, a in zip(lines, arrays[2:])}


@pytest.mark.parametrize("vectors", [64, 128, 256, 100])
def test_every_line_is_prefetched_once(vectors):
    # a row of 64 lines against passes of 64 (AVX-512), 128 (AVX2), 256 (SSE) and 100 vectors,
    # with a stream of one line (a row's mean) and ones of more lines than the pass has vectors
    _, counts = _counted({"rowdata": 64, "mean": 1, "wide": 300, "double": 2 * vectors}, vectors)
    for name, got in counts.items():
        assert (got == 1).all(), f"{name}: lines prefetched other than once: {dict(enumerate(got.tolist()))}"


def test_one_line_streams_go_to_the_top_and_longer_ones_into_the_pass():
    tir, _ = _counted({"rowdata": 64, "mean": 1}, 128)
    top, loop = tir.split("for i in range(128)", 1) if "for i in range(128)" in tir else tir.split("for i in", 1)
    assert "mean_count" in top and "rowdata_count" not in top
    assert "rowdata_count" in loop and "i % 2 == 0" in loop

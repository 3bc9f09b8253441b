"""3x3 convolutions as Winograd F(2x2, 3x3) (graph stage: the "winograd" pass, after
simplification and before weight layout): a conv2d with a constant weight that the target
runs faster this way becomes the three ops of `akg.graph.ops.winograd` (input transform,
batched product with the weight transformed once at compile time, output transform), which
fusion then cuts into three kernels, the output transform taking the conv's epilogue.

Where: on a target that asks for it (`Target.winograd`, the CPU), for a stride-1, undilated,
ungrouped 3x3 float32 conv with padding of at most 1, 64 channels or more in and out (fewer
do not amortise the transforms: 32 channels at 56 px ran 5% slower than direct), and rows of
2x2 tiles between half a vector and two vectors wide (outputs 17-63 pixels wide with AVX-512):
the product's vectors run along a row of tiles, padded to a whole vector where it is shorter;
narrower rows would be mostly padding (256 channels at 14 px: 1.3x slower than direct), and
wider rows take a register tile without output channels. ResNet's 3x3 convs at 56 px (64
channels) and 28 px (128), with their epilogues: 1050 -> 845 us and 1069 -> 667-740 us (2
Zen 4 cores, docs/performance.md)."""

from __future__ import annotations

import logging

import numpy as np

from akg.graph.ir import Graph, Value
from akg.graph.ops.conv import pads4, pair
from akg.graph.ops.winograd import tiles_of, weight_transform
from akg.graph.simplify import _Rewriter, dce
from akg.graph.types import TensorType

log = logging.getLogger(__name__)

MIN_CHANNELS = 64


def tile_columns(target, node) -> int | None:
    """The columns of 2x2 tiles the product runs along for `node` (a conv2d) on `target`: the
    tiles of an output row, or one vector of them where the row has fewer; None where the
    conv is not run as Winograd there (see the module doc)."""
    if not getattr(target, "winograd", False):  # None, or a target object that describes other things only
        return None
    lanes = target.vector_lanes(node.outputs[0].dtype)
    _, _, oh, ow = node.outputs[0].shape
    cols = tiles_of(oh, ow)[1]
    if not lanes // 2 <= cols < 2 * lanes:
        return None
    return max(cols, lanes)


def winograd_columns(node, weight: np.ndarray | None, target) -> int | None:
    """The tile columns (`tile_columns`) of conv2d `node` with constant `weight` (None: computed)
    where it runs as Winograd on `target`; None where it stays a conv."""
    if weight is None or weight.dtype != np.float32 or weight.shape[2:] != (3, 3):
        return None
    if node.attrs["groups"] != 1 or pair(node.attrs["strides"], "strides") != (1, 1) \
            or pair(node.attrs["dilation"], "dilation") != (1, 1):
        return None
    if max(pads4(node.attrs["padding"])) > 1 or min(weight.shape[:2]) < MIN_CHANNELS:
        return None
    return tile_columns(target, node)


def winograd_convs(graph: Graph, target=None) -> Graph:
    """`graph` with every conv2d that runs as Winograd on the target (`winograd_columns`)
    rewritten as Winograd's three ops; the output keeps the conv's value, so its users (the
    epilogue) are unchanged."""
    if not getattr(target, "winograd", False):
        return graph
    rw = _Rewriter(graph)
    transformed: dict[Value, Value] = {}  # conv weight -> its U
    for node in rw.walk():
        ins = rw.inputs(node)
        cols = winograd_columns(node, rw.constants.get(ins[1]), target) if node.op == "conv2d" else None
        if cols is None:
            rw.keep(node)
            continue
        x, w = ins
        out = node.outputs[0]
        n, k, oh, ow = out.shape
        rows = tiles_of(oh, ow)[0]
        pt, pl, _, _ = pads4(node.attrs["padding"])
        if w not in transformed:
            u = weight_transform(rw.constants[w])
            transformed[w] = Value(rw.fresh(f"{w.name}.winograd"), TensorType(u.shape, w.dtype))
            rw.constants[transformed[w]] = u
        v = Value(rw.fresh(f"{out.name}.tiles_in"), TensorType((4, 4, x.shape[1], n * rows, cols), x.dtype))
        m = Value(rw.fresh(f"{out.name}.tiles_out"), TensorType((4, 4, k, n * rows, cols), x.dtype))
        sizes = {"out_hw": [oh, ow], "cols": cols}
        rw.emit("winograd_input", [x], {"padding": [pt, pl], **sizes}, [v])
        rw.emit("winograd_product", [transformed[w], v], {}, [m])
        rw.emit("winograd_output", [m], {"batch": n, **sizes}, node.outputs)
        rw.changes += 1
        log.debug("%s: conv %%%s as Winograd F(2x2, 3x3), %d tile columns", graph.name, out.name, cols)
    return dce(rw.finish("winograd")) if rw.changes else graph

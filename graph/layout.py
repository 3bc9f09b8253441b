"""Layout of constant weights, decided once at compile time.

A matmul whose right operand is a constant (a dense layer's weight) reads it in column
panels: the kernel's register tile walks the reduction with a strip of `PANEL` columns, and
CPU mappings copy ("pack") each panel into a contiguous local buffer per call. For a
constant the copy can be done once: `pack_weights` stores the weight as panels
`[N / PANEL, K, PANEL]` (each panel a contiguous K x PANEL block) and reads it back through
a transpose + reshape, which fusion folds into the matmul kernel as index arithmetic. The
kernel then streams each panel contiguously and needs no pack copy (the promoter skips a
panel that is already one contiguous slice). Values are unchanged: this is a relayout.

The panel width is the width of the vector strip that a CPU register tile computes (two
vectors, or one when two do not divide the columns; `akg.schedules.cpu_band.vector_strip`), so that each vector
load of the tile is one contiguous slice of a panel: 16 float32 with AVX2, 32 with AVX-512. A
panel narrower than the strip makes every vector load a gather (on AVX-512, 16-column panels
ran the transformer's dense layers 3.5x slower than 32-column ones). Without a target the width
is `PANEL`.

A convolution whose output rows are narrower than a vector (the 4x4 .. 1x1 images of a small
CNN's later stages, ResNet-18's 7x7), or that is strided (a vector along its output row would
gather its input: ResNet's stems and downsampling convs, given whole vectors of output
channels), has nothing to vectorise along its output width; the CPU
mapping then vectorises over output channels instead (`akg.schedules.cpu_defaults.default_band`), which
reads the weight along its first axis. So it does for a stride-1 conv with wide rows and four
vectors of output channels or more (ResNet-18's 3x3 convs at 56 and 28 px): each broadcast
input then feeds every vector of channels, where a vector along the row is an unaligned load
feeding one channel per broadcast weight. `pack_weights` stores such a constant weight
`[O, C/groups, KH, KW]` with the output channel last, `[C/groups, KH, KW, O]`, or, for a weight
over half of L2 (where the mapping takes cache tiles of channels), in blocks of the CPU's vector
strip (`weight_panel` of the output channels, as for matmul panels): `[O/b, C/groups, KH, KW, b]`
where the strip divides the channels; read back through a
transpose (and a reshape) that fusion folds into the conv kernel. Each vector of output
channels then loads one contiguous slice of the weight instead of gathering 16 elements
`C * KH * KW` apart (ResNet-18 width 16's 3x3 conv at 4x4, 32 channels, batch 2: ~3x faster with
the same mapping; scripts/bench/small_convs.py measures the layout and mapping together), and
the register tile's strip of channels streams its whole reduction contiguously, so a cache tile
of channels needs no pack copy per call (the promoter skips a panel that is already one
contiguous slice).
Depthwise weights are left alone: their input is read along the channels as well, so the
mapping keeps the output width innermost. So are the weights of a strided conv over an image's
few channels with output rows a vector wide or more (a CNN's stem over RGB,
`akg.graph.ops.conv.image_rows`): its input is read in phases of its columns, so its output
rows are the vector loop without gathering, and it stores whole vectors of NCHW rows.

A matmul weight that is not stored in panels (its columns are no multiple of the strip) is
stored one way for each width, whichever way the model wrote it: `[N, K]`, read with
`transpose_b`, when its N columns fill less than a vector (`narrow_columns`: a classifier's
10 outputs, each a dot product over a contiguous row), `[K, N]` otherwise (`wide_columns`:
vectors along N). Model files differ here (MindSpore writes `[N, K]` with `transpose_b`,
PyTorch's ONNX export `[K, N]`); the same model then compiles to the same kernels through
every door, and to the faster of the two.

Computed operands are not stored, but the same holds for them: a batch matmul that reads a
computed right operand `[.., N, K]` with `transpose_b` (an attention's K^T) reads it through a
transpose to `[.., K, N]` instead (`reads_rows_across`), which fusion folds into the kernel that
computes it, so that kernel writes K already transposed and the scores' vectors along N load
contiguously.
"""

from __future__ import annotations

import logging

import numpy as np

from akg.graph.ir import Graph, Value
from akg.graph.simplify import _Rewriter, dce
from akg.graph.types import TensorType

log = logging.getLogger(__name__)

PANEL = 16


def weight_panel(target, dtype: str, columns: int) -> int | None:
    """Columns per panel of a `columns`-wide weight on `target` (None: `PANEL`), as the target
    says (`Target.weight_panel`: the CPU's register-tile vector strip); None: not stored as
    panels on that target."""
    if target is None:
        return PANEL
    return target.weight_panel(dtype, columns)


def channels_last_lanes(target, dtype: str, out_channels: int) -> int | None:
    """Vector lanes over which a conv's output channels would be computed on `target`: the
    target's lanes where it stores weights in vector-strip panels (`Target.weight_panel`; the
    CPU), `PANEL` without a target; None where it does not (that target keeps its weights)."""
    if target is None:
        return PANEL
    lanes = getattr(target, "vector_lanes", None)  # targets that only describe their panels: none
    if lanes is None or target.weight_panel(dtype, out_channels) is None:
        return None
    return lanes(dtype)


def wants_channels_last(node, weight: np.ndarray, target) -> bool:
    """Whether a conv2d with constant `weight` [O, C/groups, KH, KW] is mapped over output
    channels (its output rows are narrower than a vector, or it is strided, so that a vector
    along its output row would gather its input; it has a vector of channels or more, whole
    vectors of them when strided; or its window slides along rows of any width, with four
    vectors of channels or more and a reduction as deep, `akg.schedules.cpu_defaults.channel_rich`) and
    so reads its weight best with the output channel last. Not depthwise or grouped convs,
    whose input is read along the channels too, nor a strided conv over an image's channels
    with rows a vector wide (a CNN's stem), which runs along its output rows
    (`akg.graph.ops.conv.image_rows`)."""
    from akg.graph.ops.conv import image_rows, pair

    lanes = channels_last_lanes(target, node.outputs[0].dtype, weight.shape[0])
    o, depth = weight.shape[0], int(np.prod(weight.shape[1:]))
    if lanes is None or node.attrs["groups"] != 1 or o < lanes:
        return False
    strides = pair(node.attrs["strides"], "strides")
    if image_rows(weight.shape[1], strides[1], node.outputs[0].shape[-1], lanes):
        return False
    strided = max(strides) > 1 and o % lanes == 0
    rich = weight.shape[-1] > 1 and o >= 4 * lanes and o % lanes == 0 and depth >= 4 * lanes
    return node.outputs[0].shape[-1] < lanes or strided or rich


def _strip_is_block(node, target, block: int | None) -> bool:
    """Whether a strided conv stored channels-last gets its weight in blocks of `block` output
    channels however small: its register tile's strip of channels (`Target.channel_strip`) is
    one block, whose whole reduction then streams contiguously where channels-last rows give
    each strip every other 128 bytes (ResNet-18 224's 1x1/2 conv 256 -> 512 channels at 7 px,
    a 512 KB weight from memory in the model: 123 -> 91-101 us; 2 Xeon cores)."""
    from akg.graph.ops.conv import pair

    strip = getattr(target, "channel_strip", None)
    return (block is not None and strip is not None and max(pair(node.attrs["strides"], "strides")) > 1
            and strip(node.outputs[0].dtype, node.outputs[0].shape[-1]) == block)


def pack_weights(graph: Graph, panel: int = PANEL, *, target=None) -> Graph:
    """Constant right operands of matmul stored as `[N / panel, K, panel]` panels (with a
    `target`, each weight's panel width is `weight_panel(target, ...)` instead of `panel`), and
    constant conv weights that the mapping reads along the output channels stored with the
    output channel last (`wants_channels_last`); a batch matmul's computed right operand read
    with `transpose_b` read through a transpose to `[.., K, N]` (`reads_rows_across`)."""
    rw = _Rewriter(graph)
    widths = set()
    packed: dict[tuple[Value, bool], Value] = {}  # (weight, transposed) -> its unpacked view
    channels_last: dict[Value, Value] = {}  # conv weight -> its [O, C, KH, KW] view
    flipped: dict[tuple[Value, bool], Value] = {}  # (weight, transposed) -> the weight stored transposed
    flipped_values: dict[Value, Value] = {}  # computed K^T -> the same values written [.., K, N]
    for node in rw.walk():
        ins = rw.inputs(node)
        if node.op == "conv2d":
            weight = rw.constants.get(ins[1])
            if weight is None or not wants_channels_last(node, weight, target):
                rw.keep(node)
                continue
            if ins[1] not in channels_last:
                # blocks of channels where the mapping takes cache tiles of channels (a weight
                # over half of L2): each tile then reads its block in place; smaller weights stay
                # channels-last (ResNet-18 width 16's 64-channel convs at 2 px ran 6.4 -> 50 us
                # with 32-channel blocks under the 4-vector accumulator strip), unless strided
                # with a register strip of one block (`_strip_is_block`)
                l2 = 0 if target is None else getattr(target, "l2_bytes", 1 << 20)  # as cpu_defaults.default_bands
                panel = weight_panel(target, ins[1].dtype, weight.shape[0])
                blocked = weight.nbytes > l2 // 2 or _strip_is_block(node, target, panel)
                block = panel if blocked else None
                channels_last[ins[1]] = _emit_channels_last(rw, ins[1], weight, block)
            rw.emit("conv2d", [ins[0], channels_last[ins[1]]], node.attrs, node.outputs)
            rw.changes += 1
            continue
        if node.op == "batch_matmul" and node.attrs.get("transpose_b") and _computed(rw, ins[1]) \
                and reads_rows_across(target, ins[1]):
            # K^T of an attention (a computed [B, N, K], read with transpose_b): vectors along N
            # would gather every K-th element; its producer writes it [B, K, N] instead
            if ins[1] not in flipped_values:
                flipped_values[ins[1]] = _emit_k_major(rw, ins[1])
            rw.emit("batch_matmul", [ins[0], flipped_values[ins[1]]], {**node.attrs, "transpose_b": False},
                    node.outputs)
            rw.changes += 1
            continue
        weight = rw.constants.get(ins[1]) if node.op == "matmul" and len(ins) == 2 else None
        if weight is None or weight.ndim != 2:
            rw.keep(node)
            continue
        transposed = bool(node.attrs["transpose_b"])
        k, n = weight.shape[::-1] if transposed else weight.shape
        width = panel if target is None else weight_panel(target, ins[1].dtype, n)
        panelled = width is not None and n % width == 0 and n > width and k >= 2
        if transposed:  # [N, K]: to [K, N] where no panels take it and N fills a vector
            flip = not panelled and wide_columns(target, ins[1].dtype, k, n)
        else:  # [K, N]: to [N, K] where N is under a vector
            flip = narrow_columns(target, ins[1].dtype, k, n)
        key = (ins[1], transposed)
        if flip:
            if key not in flipped:
                flipped[key] = _emit_flipped(rw, ins[1], weight, ".t.k_n" if transposed else ".nk")
            rw.emit("matmul", [ins[0], flipped[key]], {**node.attrs, "transpose_b": not transposed}, node.outputs)
            rw.changes += 1
            continue
        if not panelled:
            rw.keep(node)
            continue
        if key not in packed:
            packed[key] = _emit_panels(rw, ins[1], weight, transposed, k, n, width)
            widths.add(width)
        attrs = {**node.attrs, "transpose_b": False}
        rw.emit("matmul", [ins[0], packed[key]], attrs, node.outputs)
        rw.changes += 1
    if not packed and not channels_last and not flipped and not flipped_values:
        return graph
    log.debug("pack_weights on %s: %d weight(s) stored as panels of %s columns, %d conv weight(s) with "
              "the output channel last, %d matmul weight(s) stored transposed", graph.name,
              len(packed), "/".join(map(str, sorted(widths))), len(channels_last), len(flipped))
    return dce(rw.finish("pack_weights"))


# The values pack_weights derives from a constant matmul weight %W: the weight stored as panels
# and the transpose and reshape that read it back as [K, N] (".t": from a transposed weight); from
# a conv weight: the weight stored channels-last and the transpose that reads it back as OIHW.
DERIVED_SUFFIXES = (*(f"{t}{tail}" for t in ("", ".t") for tail in (".panels", ".panels.kmajor", ".kn")),
                    ".ihwo", ".oihw", ".Oihwo", ".Ooihw", ".nk", ".t.k_n")


def derived_names(planned, model) -> dict[str, str]:
    """Names of values in `planned` that pack_weights derived from a constant of `model` (the
    user's graph), mapped to that constant's name; names the user wrote are not included."""
    own = {v.name for v in model.values}
    present = {v.name for v in planned.values}
    return {v.name + sfx: v.name for v in model.constants for sfx in DERIVED_SUFFIXES
            if v.name + sfx in present and v.name + sfx not in own}


def _emit_panels(rw: _Rewriter, w: Value, weight: np.ndarray, transposed: bool, k: int, n: int,
                 panel: int) -> Value:
    """Add the panel constant and the transpose + reshape that read it as `[K, N]`."""
    if transposed:  # [N, K] -> [N / panel, panel, K] -> [N / panel, K, panel]
        panels = weight.reshape(n // panel, panel, k).transpose(0, 2, 1)
    else:  # [K, N] -> [K, N / panel, panel] -> [N / panel, K, panel]
        panels = weight.reshape(k, n // panel, panel).transpose(1, 0, 2)
    suffix = ".t" if transposed else ""
    stored = Value(f"{w.name}{suffix}.panels", TensorType((n // panel, k, panel), w.dtype))
    rw.constants[stored] = np.ascontiguousarray(panels)
    moved = Value(f"{w.name}{suffix}.panels.kmajor", TensorType((k, n // panel, panel), w.dtype))
    view = Value(f"{w.name}{suffix}.kn", TensorType((k, n), w.dtype))
    rw.emit("transpose", [stored], {"perm": [1, 0, 2]}, [moved])
    rw.emit("reshape", [moved], {"shape": [k, n]}, [view])
    return view


def narrow_columns(target, dtype: str, k: int, n: int) -> bool:
    """Whether a constant `[K, N]` matmul weight is better stored `[N, K]` (read with
    `transpose_b`): its N columns fill less than one vector of `target` while its reduction
    spans at least one. Vectorised along N such a matmul wastes most of every vector and walks
    the weight with a stride of N; stored by output column each output is a dot product over a
    contiguous row (8x128 by 128x10: 3.8 -> 0.3 us on AVX-512; 64x256 by 256x10: 28 -> 5 us)."""
    lanes = channels_last_lanes(target, dtype, n)
    return lanes is not None and 1 < n < lanes <= k


def wide_columns(target, dtype: str, k: int, n: int) -> bool:
    """Whether a constant `[N, K]` weight read with `transpose_b` (and not stored in panels:
    its N is no multiple of the vector strip) is better stored `[K, N]`: its N columns fill a
    vector at least. The CPU mapping then vectorises along N with contiguous loads, where
    `[N, K]` gives each output a dot product with a horizontal sum (LeNet-5's 4x400 by
    400x120: 7.1 -> 4.0 us; 8x1000 by 1000x100: 57 -> 18 us; 256x512 by 512x120: 655 -> 285 us)."""
    lanes = channels_last_lanes(target, dtype, n)
    return lanes is not None and n >= lanes and k >= 2


def _computed(rw: _Rewriter, v: Value) -> bool:
    """Is `v` computed by a kernel: produced by an op other than a reshape or transpose, or
    through a chain of those (which fusion folds into that kernel's stores)? Not a constant or
    a graph input, whose transposed copy would be a kernel of its own."""
    pending = rw.producer.get(rw.get(v))
    while pending is not None and pending.op in ("reshape", "transpose"):
        pending = rw.producer.get(rw.get(pending.inputs[0]))
    return pending is not None


def reads_rows_across(target, b: Value) -> bool:
    """Whether a computed right operand `[.., N, K]` of a batch matmul read with `transpose_b`
    is better written `[.., K, N]` by its producer (a transpose that fusion folds into the
    producing kernel's stores): its N columns fill a vector of `target` (the CPU then
    vectorises along N, which on `[N, K]` gathers every K-th element: an attention's Q K^T
    over 12 heads x 128 x 64 took 212 us, 71 us on the producer's `[K, N]`, whose matmul went
    436 -> 472 us with its transposed stores; 2 Xeon cores), as `wide_columns` decides for a
    constant weight."""
    if len(b.shape) < 3:
        return False
    n, k = b.shape[-2:]
    return wide_columns(target, b.dtype, k, n)


def _emit_k_major(rw: _Rewriter, b: Value) -> Value:
    """Add `b` ([.., N, K]) read through a transpose of its last two dims, as `<b>.k_n`."""
    rank, shape = len(b.shape), tuple(b.shape)
    moved = Value(rw.fresh(f"{b.name}.k_n"), TensorType((*shape[:-2], shape[-1], shape[-2]), b.dtype))
    rw.emit("transpose", [b], {"perm": [*range(rank - 2), rank - 1, rank - 2]}, [moved])
    return moved


def _emit_flipped(rw: _Rewriter, w: Value, weight: np.ndarray, suffix: str) -> Value:
    """Add the 2-d weight stored transposed, as `<w><suffix>` (the caller flips `transpose_b`)."""
    stored = Value(f"{w.name}{suffix}", TensorType(weight.shape[::-1], w.dtype))
    rw.constants[stored] = np.ascontiguousarray(weight.T)
    return stored


def _emit_channels_last(rw: _Rewriter, w: Value, weight: np.ndarray, block: int | None) -> Value:
    """Add the conv weight stored as `[O/block, C, KH, KW, block]` (as `[C, KH, KW, O]` where
    `block` does not divide O into several blocks) and the transpose (and reshape) that read it
    as `[O, C, KH, KW]`."""
    o, c, kh, kw = weight.shape
    view = Value(f"{w.name}.oihw", TensorType((o, c, kh, kw), w.dtype))
    if not block or o % block or block >= o:
        stored = Value(f"{w.name}.ihwo", TensorType((c, kh, kw, o), w.dtype))
        rw.constants[stored] = np.ascontiguousarray(weight.transpose(1, 2, 3, 0))
        rw.emit("transpose", [stored], {"perm": [3, 0, 1, 2]}, [view])
        return view
    blocks = weight.reshape(o // block, block, c, kh, kw).transpose(0, 2, 3, 4, 1)
    stored = Value(f"{w.name}.Oihwo", TensorType(blocks.shape, w.dtype))
    rw.constants[stored] = np.ascontiguousarray(blocks)
    moved = Value(f"{w.name}.Ooihw", TensorType((o // block, block, c, kh, kw), w.dtype))
    rw.emit("transpose", [stored], {"perm": [0, 4, 1, 2, 3]}, [moved])
    rw.emit("reshape", [moved], {"shape": [o, c, kh, kw]}, [view])
    return view

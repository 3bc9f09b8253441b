"""NPU recipe, convolutions: finding a band's window contraction from its statement's access
functions (not from an op name), folding a zero-padding producer into it, and sizing its cube
tile (images x filters x output rows x whole output rows, the channel chunk in L1 and the K step
in L0A/L0B).

A window contraction is `out[b, f, y, x] = sum_{c, ry, rx} X[b, c, y*sh + ry*dh - pt, x*sw +
rx*dw - pl] * W[f, c, ry, rx]` with fp16 operands (casts around the loads allowed, X possibly
read through `select(inside(..), X[..], 0)`): on the cube it is a matmul of the filters (m = f)
by the im2col matrix of X (k = (c, ry, rx), n = (b, y, x)), the matrix built in L0B by
`Img2col` from X's tile in L1."""

from __future__ import annotations

from dataclasses import dataclass

from akg.graph.compute.expr import Call, Cast, ComputeOp, Const, Load, Select, Var, rebuild, substitute

FRACTAL = 16


@dataclass(frozen=True)
class ConvShape:
    """The geometry of a window contraction (NCHW input, OIHW weights)."""

    images: int
    filters: int
    out: tuple[int, int]  # (oh, ow)
    channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int]  # (top, left): the input row/col of output (0, 0) at tap (0, 0) is -pad
    size: tuple[int, int]  # the input's (h, w)

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def k(self) -> int:
        return self.channels * self.taps

    def rows_in(self, rows_out: int) -> int:
        """Input rows a tile of `rows_out` output rows reads (clamped to the map)."""
        return min(self.size[0], (rows_out - 1) * self.stride[0] + (self.kernel[0] - 1) * self.dilation[0] + 1)

    @property
    def rows_inside(self) -> bool:
        """Every window row lies inside the map (no padding rows): output rows may be tiled."""
        top = self.pad[0]
        last = (self.out[0] - 1) * self.stride[0] + (self.kernel[0] - 1) * self.dilation[0] - top
        return top == 0 and last < self.size[0]


def _linear(e) -> tuple[dict, int] | None:
    """An index expression as ({Var: coeff}, const), or None when it is not affine."""
    if isinstance(e, Const):
        return {}, int(e.value)
    if isinstance(e, Var):
        return {e: 1}, 0
    if isinstance(e, Call) and e.op in ("add", "sub", "mul") and len(e.args) == 2:
        a, b = _linear(e.args[0]), _linear(e.args[1])
        if a is None or b is None:
            return None
        if e.op == "mul":
            if a[0] and b[0]:
                return None
            (terms, k), factor = (a, b[1]) if a[0] else (b, a[1])
            return {v: c * factor for v, c in terms.items()}, k * factor
        sign = 1 if e.op == "add" else -1
        out = dict(a[0])
        for v, c in b[0].items():
            out[v] = out.get(v, 0) + sign * c
        return {v: c for v, c in out.items() if c}, a[1] + sign * b[1]
    return None


def _strip_casts(e):
    while isinstance(e, Cast):
        e = e.value
    return e


def _padded_source(e):
    """(load of the unpadded tensor, its bounds condition) when `e` reads zero-padded data
    (`select(cond, X[..], 0)`); (load, None) for a plain load; None otherwise."""
    e = _strip_casts(e)
    if isinstance(e, Load):
        return e, None
    if isinstance(e, Select) and isinstance(e.b, Const) and float(e.b.value) == 0.0:
        a = _strip_casts(e.a)
        if isinstance(a, Load) and a.tensor.op is None:
            return a, e.cond
    return None


def _bounds_condition(cond, load: Load) -> bool:
    """Is `cond` a conjunction of `0 <= index` / `index < extent` over the load's own indices
    and extents (the padding test; the terms that always hold are left out by `inside`)?"""
    terms = []

    def split(c):
        if isinstance(c, Call) and c.op == "and":
            split(c.args[0])
            split(c.args[1])
        else:
            terms.append(c)

    split(cond)
    for t in terms:
        if not (isinstance(t, Call) and t.op in ("ge", "lt") and isinstance(t.args[1], Const)):
            return False
        form = _linear(t.args[0])
        if form is None:
            return False
        dims = [d for d, idx in enumerate(load.indices) if _linear(idx) == form]
        if not dims:
            return False
        bound = int(t.args[1].value)
        if not (t.op == "ge" and bound == 0 or t.op == "lt" and bound == load.tensor.shape[dims[0]]):
            return False
    return True


def conv_shape(op: ComputeOp) -> ConvShape | None:
    """The window contraction of `op` (fp16 operands, one group), or None. The operands' dims
    are found by their index variables: the channel (and the filter) dim anywhere, the others
    in the order image, row, column (NCHW / NHWC input, OIHW / OHWI weights)."""
    red = op.reduce
    if red is None or red.reducer != "sum" or len(red.axes) != 3 or len(op.axes) != 4:
        return None
    src = red.source
    if not (isinstance(src, Call) and src.op in ("mul", "multiply") and len(src.args) == 2):
        return None
    b, f, y, x = op.axes
    c, ry, rx = red.axes
    for xe, we in ((src.args[0], src.args[1]), (src.args[1], src.args[0])):
        xs, w = _padded_source(xe), _strip_casts(we)
        if xs is None or not isinstance(w, Load) or w.tensor.op is not None:
            continue
        xl, cond = xs
        if str(xl.tensor.dtype) != "float16" or str(w.tensor.dtype) != "float16" or xl.tensor.ndim != 4:
            continue
        if c.extent <= max(ry.extent, rx.extent):
            continue  # the backend tells the channel loop by its length
        wi = [_linear(i) for i in w.indices]
        if ({f: 1}, 0) not in wi or ({c: 1}, 0) not in wi:
            continue
        wf, wc = wi.index(({f: 1}, 0)), wi.index(({c: 1}, 0))
        if [wi[d] for d in range(4) if d not in (wf, wc)] != [({ry: 1}, 0), ({rx: 1}, 0)]:
            continue
        xi = [_linear(i) for i in xl.indices]
        if None in xi or ({c: 1}, 0) not in xi:
            continue
        xc = xi.index(({c: 1}, 0))
        xd = [d for d in range(4) if d != xc]
        if xi[xd[0]] != ({b: 1}, 0):
            continue
        (hy, ky), (hx, kx) = xi[xd[1]], xi[xd[2]]
        if set(hy) - {y, ry} or set(hx) - {x, rx} or hy.get(y, 0) < 1 or hx.get(x, 0) < 1:
            continue
        if ky > 0 or kx > 0 or (ky or kx) and cond is None:
            continue  # negative offsets only, and only with the padding's bounds test
        if cond is not None and not _bounds_condition(cond, xl):
            continue
        n, h, wd = (xl.tensor.shape[d] for d in xd)
        channels = xl.tensor.shape[xc]
        return ConvShape(n, w.tensor.shape[wf], (y.extent, x.extent), channels, (ry.extent, rx.extent),
                         (hy[y], hx[x]), (hy.get(ry, 1) if ry.extent > 1 else 1, hx.get(rx, 1) if rx.extent > 1 else 1),
                         (-ky, -kx), (h, wd))
    return None


def on_cube(shape: ConvShape | None) -> bool:
    """Channels and filters in whole fractals: the cube takes the convolution."""
    return shape is not None and shape.channels % FRACTAL == 0 and shape.filters % FRACTAL == 0


def cast_of(op: ComputeOp, source: ComputeOp) -> bool:
    """Is `op` exactly `out[p(i)] = float16(source[i])`, p a permutation of the dims (the cube's
    epilogue of a contraction: the cast, with a layout transpose for a convolution)?"""
    body = op.body
    if not (isinstance(body, Cast) and str(body.dtype) == "float16" and isinstance(body.value, Load)
            and body.value.tensor is source.output):
        return False
    idx = body.value.indices
    if not (all(isinstance(i, Var) for i in idx) and sorted(map(id, idx)) == sorted(map(id, op.axes))):
        return False
    if len(idx) == 4:  # a convolution's [image, filter, row, col]: image, row, col stay in order
        at = [next(k for k, a in enumerate(op.axes) if a is i) for i in idx]
        return at[0] < at[2] < at[3]
    return True


def fold_padding(program):
    """The program with each zero-padding producer read by a cube convolution folded into the
    convolution's load (`select(inside, X[..], 0)`), so the kernel is one band whose padding
    `Img2col` supplies (no padded copy of X in GM). Other programs come back unchanged."""
    from akg.graph.compute.lower import Program, loads_of

    ops = program.ops()
    folded: dict[int, ComputeOp] = {}
    remap: dict[int, object] = {}

    def fold(e):
        touched = False

        def fn(node):
            nonlocal touched
            if not isinstance(node, Load):
                return None
            t = node.tensor
            if id(t) in folded:
                touched = True
                pad = folded[id(t)]
                return substitute(pad.body, dict(zip(pad.axes, node.indices)))
            if id(t) in remap:
                touched = True
                return Load(remap[id(t)], node.indices)
            return None
        out = rebuild(e, fn)
        return out if touched else e

    changed = False
    for op in ops:
        red = op.reduce
        if red is not None and len(red.axes) == 3 and isinstance(red.source, Call):
            pads = {}
            for arg in red.source.args:
                ld = _strip_casts(arg)
                if isinstance(ld, Load) and ld.tensor.op is not None and _padded_source(ld.tensor.op.body):
                    pads[id(ld.tensor)] = ld.tensor.op
            if pads:
                saved = dict(folded)
                folded.update(pads)
                candidate = ComputeOp(op.name, op.axes, fold(op.body), op.output.layout)
                readers = [o for o in ops if any(ld.tensor is op.output for ld in loads_of(o))]
                if on_cube(conv_shape(candidate)) and len(readers) == 1 and cast_of(readers[0], op):
                    remap[id(op.output)] = candidate.output
                    changed = True
                    continue
                folded.clear()
                folded.update(saved)
        body = fold(op.body)
        if body is not op.body:
            remap[id(op.output)] = ComputeOp(op.name, op.axes, body, op.output.layout).output
    if not changed:
        return program
    return Program(program.name, program.inputs, [remap.get(id(t), t) for t in program.outputs], program.params,
                   program.complex_io)


def conv_roles(shape: ConvShape, extents) -> tuple[str, ...] | None:
    """The role of each band member ("b" images, "f" filters, "y" output rows, "x" output
    columns), matched by extent: the scheduler orders the members its own way and leaves out
    those of one iteration. None when the extents do not tell the roles apart (equal extents,
    except rows = columns, where rows are then kept whole like columns)."""
    sizes = {"b": shape.images, "f": shape.filters, "y": shape.out[0], "x": shape.out[1]}
    live = {r: e for r, e in sizes.items() if e > 1}
    main = [e for r, e in live.items() if r != "x"]
    if len(set(main)) < len(main) or "x" in live and live["x"] in (live.get("b"), live.get("f")):
        return None
    if sorted(extents) != sorted(live.values()):
        return None
    roles, used = [], set()
    for e in extents:
        role = next(r for r in ("b", "f", "y", "x") if live.get(r) == e and r not in used)
        used.add(role)
        roles.append(role)
    return tuple(roles)


def member_tiles(roles: tuple[str, ...], bt: int, ft: int, yt: int, shape: ConvShape) -> tuple[int, ...]:
    """(images, filters, rows) per tile as tile sizes in the band's member order."""
    by_role = {"b": bt, "f": ft, "y": yt, "x": shape.out[1]}
    return tuple(by_role[r] for r in roles)


def role_tiles(roles: tuple[str, ...], tile) -> tuple[int, int, int, int]:
    """A member-order tile as (images, filters, rows, columns); members not in the band: 1."""
    by_role = dict(zip(roles, tile))
    return by_role.get("b", 1), by_role.get("f", 1), by_role.get("y", 1), by_role.get("x", 1)


def padded_positions(shape: ConvShape, rows: int) -> int:
    """n columns of one image's tile of `rows` output rows, in whole fractals."""
    return -(-(rows * shape.out[1]) // FRACTAL) * FRACTAL


def conv_fits(spec, shape: ConvShape, tile: tuple[int, int, int], ct: int, kt: int, buffers: int) -> bool:
    """Do the buffers of a (images, filters, rows) tile with an L1 chunk of `ct` channels and
    a K step of `kt` fit L1 / L0A / L0B / L0C / UB?"""
    bt, ft, yt = tile
    n = bt * padded_positions(shape, yt)
    fmap = (ct // FRACTAL) * bt * shape.rows_in(yt) * shape.size[1] * FRACTAL * 2
    weights = ft * ct * shape.taps * 2
    ub = ft * n * 2  # the fp16 output tile, whole fractal columns
    return ((fmap + weights) * buffers <= spec.l1_bytes and 2 * ft * kt * buffers <= spec.l0a_bytes
            and 2 * kt * n * buffers <= spec.l0b_bytes and 4 * ft * n <= spec.l0c_bytes
            and ub <= spec.ub_usable_bytes)


def conv_estimate(spec, shape: ConvShape, tile: tuple[int, int, int], ct: int, kt: int, buffers: int = 2) -> float:
    """A rough time of a tiling in cycles: per core, the busiest of its cube work, its MTE1
    work (the im2col matrix and the filters into L0) and its GM reads (at the path rate while
    the L2 serves what other cores read too; the HBM cap for the unique bytes), plus the DMA
    latencies of its chunks and steps."""
    bt, ft, yt = tile
    tiles = (shape.images // bt) * (shape.filters // ft) * (shape.out[0] // yt)
    cores = min(tiles, spec.cores)
    waves = -(-tiles // spec.cores)
    n = bt * padded_positions(shape, yt)
    cube = (ft // FRACTAL) * (n // FRACTAL) * (shape.k // FRACTAL)
    mte1 = shape.k * n * 2 / spec.rate("L1->L0B") + ft * shape.k * 2 / spec.rate("L1->L0A")
    reads = ft * shape.k * 2 + bt * shape.channels * shape.rows_in(yt) * shape.size[1] * 2
    shared = spec.l2_rate / cores if spec.l2_bytes else spec.gm_bytes_per_cycle / cores
    gm = reads / min(spec.rate("GM->L1"), shared)
    unique = (shape.filters * shape.k + shape.images * shape.channels * shape.size[0] * shape.size[1]) * 2
    steps = (shape.k // kt) * (spec.dma_latency + spec.cube_issue)
    chunks = (shape.channels // ct) * (bt + ct // FRACTAL) * spec.dma_latency
    count = shape.channels // ct
    per_chunk = ct * shape.taps // kt
    # ping-pong L0 halves need an even number of steps per chunk: else MTE1 and M take turns
    work = max(cube, mte1) if buffers == 2 and per_chunk % 2 == 0 else cube + mte1
    fill = (gm + work) / count  # the first chunk's load and the last chunk's work do not overlap
    per_wave = (max(work, gm) + fill + steps + chunks + 4 * spec.dma_latency
                + ft * n * 2 / spec.rate("UB->GM"))
    return max(waves * per_wave, unique / spec.gm_bytes_per_cycle)


def conv_tiles(shape: ConvShape) -> tuple[list[int], list[int], list[int]]:
    """Candidate images, filters and output rows per tile."""
    images = [d for d in range(1, shape.images + 1) if shape.images % d == 0]
    filters = [t for t in range(FRACTAL, min(shape.filters, 256) + 1, FRACTAL) if shape.filters % t == 0]
    rows = ([d for d in range(1, shape.out[0] + 1) if shape.out[0] % d == 0]
            if shape.rows_inside and shape.out[0] != shape.out[1] else [shape.out[0]])
    return images, filters, rows


def conv_k_steps(shape: ConvShape, ct: int) -> list[int]:
    """K steps (multiples of 16 dividing one chunk's ct x taps)."""
    chunk = ct * shape.taps
    return [k for k in range(FRACTAL, min(chunk, 1024) + 1, FRACTAL) if chunk % k == 0]


def conv_chunks(shape: ConvShape) -> list[int]:
    return [c for c in range(FRACTAL, shape.channels + 1, FRACTAL) if shape.channels % c == 0]


def fit_conv(spec, shape: ConvShape, buffers: int):
    """((images, filters, rows), ct, kt) of the best estimated tiling that fits, or None."""
    best = None
    images, filters, rows = conv_tiles(shape)
    for bt in images:
        for ft in filters:
            for yt in rows:
                for ct in conv_chunks(shape):
                    if buffers == 2 and shape.channels // ct < 2 and ct != shape.channels:
                        continue
                    for kt in conv_k_steps(shape, ct):
                        if not conv_fits(spec, shape, (bt, ft, yt), ct, kt, buffers):
                            continue
                        cost = conv_estimate(spec, shape, (bt, ft, yt), ct, kt, buffers)
                        if best is None or cost < best[0]:
                            best = (cost, (bt, ft, yt), ct, kt)
    return None if best is None else best[1:]


__all__ = ["ConvShape", "conv_shape", "on_cube", "fold_padding", "conv_fits", "fit_conv", "conv_tiles",
           "conv_k_steps", "conv_chunks", "padded_positions", "conv_roles", "cast_of", "member_tiles", "role_tiles"]

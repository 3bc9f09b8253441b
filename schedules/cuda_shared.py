"""CUDA shared-memory tiles of a reduction's operands (the `promote(k, shared, (tile_k, pad))`
step): the reduction below outer band k is tiled by `tile_k` along its reduction axis, and
every operand whose elements the threads of a block share (a load that varies with the
reduction axis: a matmul's A and B tiles) is copied, per block and k-tile, into a shared
buffer by all the threads of the block, then read from there. This module makes the tiles
and the race check; the reduction computed from them, into each thread's register
accumulators, and the mapped band are `cuda_registers.py`'s.

For out[i] = reduce_k src(T_j[idx_j(i, k)]) with block tiles of `tile[a]` points along each
output axis a and K terms (the box of load j per block and k-tile follows from its indices:
`tile[a]` along an index that is output axis a, `tile_k` along one that is the reduction
axis, 1 along a constant):

    T_j.stile[b, kt, f] = T_j[lower_j(b, kt) + unflatten(f)]     0 past the tensor's end or in the padding
    ...                 = reduce_{kt, kk} src(T_j.stile[b, kt, local_j(offset in the tile, kk)])

with `f` the box flattened row-major, its last dim padded by `pad` elements (a knob against
bank conflicts), and terms past K reducing the identity. The copies of one block and k-tile
run over all its threads (element f on thread f mod threads, cyclically: consecutive threads
read consecutive elements), a `barrier` mark closes the copies and another the k-tile's
compute (before the next k-tile's copies overwrite the buffer). The race checker sees the
buffer as it is on the GPU: one copy per block of the flattened box (`check`), so a missing
barrier is a race on it. The tensors carry their memory in their names (`.stile`): one
`[F]` `__shared__` array per block (astgen's `scratch` hook keeps the last dim)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from akg.errors import ScheduleError
from akg.graph.compute.expr import (ComputeOp, Const, Load, Var, all_of, call, compute, const, rebuild, select,
                                    substitute)
from akg.graph.compute.lower import Program
from akg.polyhedral.block_tiles import flat_tile_accesses

TILE_TAG = ".stile"
BARRIER = "barrier"
TREE_REDUCERS = ("sum", "prod", "max", "min")


def tile_memory(name: str) -> str | None:
    """'tile' for a shared operand tile this rewrite made (by its name), else None."""
    head, found, rest = name.rpartition(TILE_TAG)
    return "tile" if found and head and rest.isdigit() else None


@dataclass(frozen=True)
class SharedTiles:
    """A band mapped over shared tiles (`cuda_registers.map_registers`): the rewritten model,
    its mapped schedule, the shared tiles' isl ids and their bytes per block."""

    model: object
    schedule: object
    shared: frozenset
    bytes: int


@dataclass(frozen=True)
class _Box:
    load: Load
    sizes: tuple[int, ...]  # per tensor dim
    row: int  # the padded last dim

    @property
    def flat(self) -> int:
        return math.prod(self.sizes[:-1]) * self.row

    def strides(self) -> list[int]:
        out, s = [], 1
        for k, n in enumerate(reversed(self.sizes)):
            out.append(s)
            s *= self.row if k == 0 else n
        return out[::-1]


def _boxes(op: ComputeOp, tiles: dict, tile_k: int, pad: int) -> list[_Box]:
    red = op.reduce
    (r,) = red.axes
    out, seen = [], set()
    for ld in (n for n in _walk(red.source) if isinstance(n, Load)):
        if not any(i is r for i in ld.indices):
            continue  # the same element for every k: nothing shared along the reduction
        sizes = []
        for i in ld.indices:
            if i is r:
                sizes.append(tile_k)
            elif isinstance(i, Var) and id(i) in tiles:
                sizes.append(tiles[id(i)])
            elif isinstance(i, Const):
                sizes.append(1)
            else:
                raise ScheduleError(f"{op.name}: {ld.tensor.name}'s index {i} is not an output axis, the reduction "
                                    f"axis or a constant; shared tiles of other indices are not done yet")
        key = (id(ld.tensor), tuple(id(i) if isinstance(i, Var) else repr(i) for i in ld.indices))
        if key in seen:
            continue
        seen.add(key)
        row = sizes[-1] + (pad if len(sizes) > 1 and sizes[-1] > 1 else 0)
        out.append(_Box(ld, tuple(sizes), row))
    return out


def _walk(e):
    from akg.graph.compute.expr import walk

    return walk(e)


def shared_bytes(boxes: list[_Box]) -> int:
    return sum(b.flat * np.dtype(b.load.tensor.dtype if b.load.tensor.dtype != "bfloat16" else "float16").itemsize
               for b in boxes)


def copy_ops(op: ComputeOp, boxes: list[_Box], tiles: dict, tile_k: int) -> list:
    """The copies of each box into its tile, `[*grid, k-tiles, F]` (see the module); `tiles`
    maps id(output axis) -> points per block."""
    (r,) = op.reduce.axes
    K = r.extent
    nkt = -(-K // tile_k)
    grid = [-(-a.extent // tiles[id(a)]) for a in op.axes]
    copies = []
    for j, box in enumerate(boxes):
        ld = box.load

        def fill(*idx, box=box, ld=ld):
            b, kt, f = idx[:len(grid)], idx[len(grid)], idx[len(grid) + 1]
            by_axis = {id(a): bi for a, bi in zip(op.axes, b)}
            offs, rest = [], f
            for k, n in reversed(list(enumerate(box.sizes))):
                m = box.row if k == len(box.sizes) - 1 else n
                offs.append(rest % m if m > 1 else const(0, f.dtype))
                rest = rest // m
            offs.reverse()
            index, conds = [], []
            for i, o, n, dim in zip(ld.indices, offs, box.sizes, ld.tensor.shape):
                if i is r:
                    g = kt * tile_k + o
                elif isinstance(i, Const):
                    g = i
                else:
                    g = by_axis[id(i)] * n + o
                index.append(g)
                if not isinstance(i, Const) and (n > 1 or i is r) and (dim % n or i is r and K % tile_k):
                    conds.append(call("lt", g, const(dim, g.dtype)))
            if box.row > box.sizes[-1]:
                conds.append(call("lt", offs[-1], const(box.sizes[-1], f.dtype)))
            value = Load(ld.tensor, index)
            return select(all_of(conds), value, const(0, ld.tensor.dtype)) if conds else value

        copies.append(compute([*grid, nkt, box.flat], fill, f"{op.name}.{j}{TILE_TAG}{len(box.sizes)}"))
    return copies


def tiled_source(op: ComputeOp, boxes: list[_Box], copies: list, kt_ax, kk_ax, tile_k: int, local, block):
    """`op`'s reduction source reading the tiles: a load of a box becomes a load of its tile at
    the block (`block(axis)`: the block index along an output axis), the k-tile and the flat
    offset of (`local(axis)`: the offset inside the block's tile, None for 0; kk along the
    reduction). Loads that do not vary along the reduction are kept; the reduction axis is
    `kt * tile_k + kk`, terms past its end the identity."""
    red = op.reduce
    (r,) = red.axes
    K = r.extent

    def swap(n):
        if not isinstance(n, Load):
            return None
        for box, t in zip(boxes, copies):
            same = all((x is y) if isinstance(y, Var) else repr(x) == repr(y)
                       for x, y in zip(n.indices, box.load.indices))
            if n.tensor is box.load.tensor and len(n.indices) == len(box.load.indices) and same:
                flat = None
                for i, s in zip(n.indices, box.strides()):
                    if i is r:
                        o = kk_ax
                    elif isinstance(i, Const):
                        continue
                    else:
                        o = local(i)
                    if o is None:
                        continue
                    term = o * s if s > 1 else o
                    flat = term if flat is None else flat + term
                return Load(t, [*(block(a) for a in op.axes), kt_ax, flat if flat is not None else const(0, "int32")])
        return None

    source = substitute(rebuild(red.source, swap), {r: kt_ax * tile_k + kk_ax})
    if K % tile_k and not (red.reducer == "sum" and _product_of_tiles(source, copies)):
        from akg.schedules.cuda_reduce import identity

        source = select(call("lt", kt_ax * tile_k + kk_ax, const(K, "int32")), source,
                        identity(red.reducer, op.output.dtype))
    return source


def _product_of_tiles(e, copies: list) -> bool:
    """Whether `e` is a product (through casts) of tile loads only: each tile holds 0 past
    the reduction's end, so a term past it is 0 x 0 = 0 and needs no guard (a matmul's A x B)."""
    from akg.graph.compute.expr import Call, Cast

    while isinstance(e, Cast):
        e = e.value
    if isinstance(e, Call) and e.op == "mul":
        return all(_product_of_tiles(a, copies) for a in e.args)
    return isinstance(e, Load) and any(e.tensor is t for t in copies)


def replace_op(program: Program, op: ComputeOp, final) -> Program:
    """`program` with `op`'s output replaced by the tensor `final` (its readers rebuilt)."""
    remap = {id(op.output): final}
    for other in program.ops():
        if other is op:
            continue
        body = rebuild(other.body, lambda n: Load(remap[id(n.tensor)], n.indices)
                       if isinstance(n, Load) and id(n.tensor) in remap else None)
        if body is not other.body:
            remap[id(other.output)] = ComputeOp(other.name, other.axes, body, other.output.layout).output
    outputs = [remap.get(id(t), t) for t in program.outputs]
    return Program(program.name, program.inputs, outputs, program.params, program.complex_io)


# --- the race check ----------------------------------------------------------------------------


def check(done: SharedTiles, max_operations: int | None = None) -> None:
    """The race checker over the mapped tiles as the GPU holds them: a tile's accesses
    projected onto its last dim (one flattened box per block, reused by every k-tile), so
    that a copy overwriting what another thread still reads is a race. RaceError if any; a
    check isl cannot finish within its quota keeps the mapping (debug note)."""
    import logging

    from akg.errors import UnprovenRaceError
    from akg.polyhedral.races import DEFAULT_MAX_OPERATIONS, check_races, mapping_of
    from akg.schedules.cuda import race_role

    model = done.model
    writes, reads = flat_tile_accesses(model, done.shared)

    ops = max_operations or DEFAULT_MAX_OPERATIONS
    labels = {tid: f"{t.name} ({tid})" for t, tid in model.tensor_ids.items() if t.name and not t.name.isdigit()}
    try:
        check_races(writes, reads, mapping_of(done.schedule, race_role, ops),
                    shared=done.shared, labels=labels, max_operations=ops)
    except UnprovenRaceError as e:
        logging.getLogger(__name__).debug("%s: race check of the shared tiles not proven: %s",
                                          model.program.name, e)

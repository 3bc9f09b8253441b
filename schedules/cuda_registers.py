"""CUDA register tiles of a reduction over shared operand tiles (`promote(k, shared, (tile_k,
pad))` with `tile(k, registers, work)`): each thread computes `work[a]` outputs along each
output axis a, cyclically (its points are `threads[a]` apart, so a warp still reads and
writes consecutive elements), and keeps their accumulators in registers across the loop over
k-tiles; they reach global memory once, after it. The operands come from the block's shared
tiles (`cuda_shared.py`), whose box along axis a grows to the block's `threads[a] x work[a]`
points, so each tile element a thread loads is used for `work` of its outputs (a matmul's
A element for a row of its outputs, a B element for a column).

For out[i] = reduce_k src(T_j[idx_j(i, k)]) with T[a] = threads[a] x work[a] points per block:

    T_j.stile[b, kt, f]     = T_j[lower_j(b, kt) + unflatten(f)]             (cuda_shared.py)
    out.racc<n>[b, t, p]    = reduce_{kt, kk} src(T_j.stile[b, kt, local_j(p * threads + t, kk)])
    out[i]                  = out.racc<n>[i / T, (i % T) % threads, (i % T) / threads]

over the padded box of blocks x threads x points (the tiles hold 0 past the tensors' ends, so
the padding reads them and nothing reads its sums back). The accumulator tensor's name
carries its memory (`.racc<n>`, n the output axes): on the GPU a thread's `prod(work)` values
(astgen's `scratch` hook keeps the n point dims: a `local` array that the unrolled point loops
index by constants, i.e. registers); in the emulation one array per block of threads x
points, since the values cross the k-tiles' barriers. The band is rebuilt over blocks, then
the accumulators' init (each thread its points), the k-tile loop (copies, barrier; each thread
the k-tile's terms, kk outside its unrolled points, barrier) and the stores with the
elementwise epilogue (bias, relu, an fp16 cast) per point of the thread that owns it
(`akg.polyhedral.register_tiles`)."""

from __future__ import annotations

import math

from akg.errors import ScheduleError
from akg.graph.compute.expr import ComputeOp, compute, const, reduce, reduce_axis, substitute
from akg.graph.compute.lower import Program
from akg.schedules.cuda_shared import BARRIER, SharedTiles, _boxes, copy_ops, replace_op, tiled_source

ACC_TAG = ".racc"


def accumulator_axes(name: str) -> int | None:
    """The output axes n of a register accumulator this rewrite made (`<op>.racc<n>`, shape
    [blocks x n, threads x n, points x n]), else None."""
    head, found, rest = name.rpartition(ACC_TAG)
    return int(rest) if found and head and rest.isdigit() else None


def register_tiles(program: Program, op: ComputeOp, threads: dict, work: dict, tile_k: int, pad: int):
    """`program` with `op` computed from shared tiles into per-thread register accumulators
    (see the module); `threads` and `work` map id(output axis) -> threads and points per
    thread along it. Returns (program, accumulator op, final op, copy ops, boxes)."""
    red = op.reduce
    (r,) = red.axes
    n = len(op.axes)
    tiles = {id(a): threads[id(a)] * work[id(a)] for a in op.axes}
    boxes = _boxes(op, tiles, tile_k, pad)
    if not boxes:
        raise ScheduleError(f"{op.name}: no operand varies along the reduction; nothing to share")
    copies = copy_ops(op, boxes, tiles, tile_k)
    nkt = -(-r.extent // tile_k)
    kt_ax, kk_ax = reduce_axis(nkt, f"{op.name}.kt"), reduce_axis(tile_k, f"{op.name}.kk")
    grid = [-(-a.extent // tiles[id(a)]) for a in op.axes]
    ts = [threads[id(a)] for a in op.axes]
    ws = [work[id(a)] for a in op.axes]

    def acc(*idx):
        b, t, p = idx[:n], idx[n:2 * n], idx[2 * n:]
        pos = {id(a): k for k, a in enumerate(op.axes)}

        def local(a):
            k = pos[id(a)]
            return p[k] * ts[k] + t[k] if tiles[id(a)] > 1 else None

        source = tiled_source(op, boxes, copies, kt_ax, kk_ax, tile_k, local, lambda a: b[pos[id(a)]])
        # loads that stay in global memory (not along the reduction) at the point's output
        at = {a: b[k] * tiles[id(a)] + (local(a) if local(a) is not None else 0) for k, a in enumerate(op.axes)}
        return reduce(red.reducer, substitute(source, at), [kt_ax, kk_ax])

    accs = compute([*grid, *ts, *ws], acc, f"{op.name}{ACC_TAG}{n}")

    def final(*i):
        zero = const(0, "int32")
        b = [x // tiles[id(a)] if grid[k] > 1 else zero for k, (x, a) in enumerate(zip(i, op.axes))]
        loc = [x % tiles[id(a)] if grid[k] > 1 else x for k, (x, a) in enumerate(zip(i, op.axes))]
        t = [y % ts[k] if ws[k] > 1 else y for k, y in enumerate(loc)]
        t = [y if ts[k] > 1 else zero for k, y in enumerate(t)]
        p = [y // ts[k] if ts[k] > 1 else y for k, y in enumerate(loc)]
        p = [y if ws[k] > 1 else zero for k, y in enumerate(p)]
        return accs[(*b, *t, *p)]

    out = compute([a.extent for a in op.axes], final, op.name)
    return replace_op(program, op, out), accs.op, out.op, [c.op for c in copies], boxes


def map_registers(model, schedule, bands, k: int, mapping, tile_k: int, pad: int, spec, apply_band,
                  barrier: str | None = BARRIER, cache: dict | None = None) -> SharedTiles:
    """Band k's reduction from shared tiles into register accumulators, `mapping.work`
    points per thread (see the module); every other band by `apply_band(node, k)`.
    ScheduleError where the band is not one reduction of a single axis over tiles of output
    axes with an elementwise epilogue, or the tiles exceed the spec's shared memory or the
    accumulators its registers."""
    from akg.polyhedral.model import build_model
    from akg.polyhedral.register_tiles import map_register_tiles
    from akg.schedules.cuda import MARK_BLOCK, MARK_THREAD
    from akg.schedules.cuda_shared import TREE_REDUCERS, shared_bytes

    info = bands[k]
    by_name = {s.name: s for s in model.statements}
    ops = {id(by_name[n].op): by_name[n].op for n in info.statements if n in by_name}
    reductions = [o for o in ops.values() if o.reduce is not None]
    if len(reductions) != 1:
        raise ScheduleError(f"band {k}: shared tiles need the band to be one reduction, it computes "
                            f"{len(reductions)} reductions")
    (op,) = reductions
    position = {id(by_name[name].op): by_name[name].position for name in info.statements if name in by_name}
    after = sorted((o for o in ops.values() if o is not op), key=lambda o: position[id(o)])
    for o in after:  # an elementwise epilogue, after the reduction in each thread
        if position[id(o)] < position[id(op)] or tuple(a.extent for a in o.axes) != tuple(info.extents):
            raise ScheduleError(f"band {k}: shared tiles need the band's other ops to be elementwise after "
                                f"{op.name} ({o.name} is not)")
    red = op.reduce
    if red.reducer not in TREE_REDUCERS or len(red.axes) != 1:
        raise ScheduleError(f"band {k}: shared tiles need a sum/prod/max/min over one axis")
    n = info.members
    if len(op.axes) != n or tuple(a.extent for a in op.axes) != tuple(info.extents):
        raise ScheduleError(f"band {k}: the band's loops are not {op.name}'s output axes")
    if mapping.reduce or any(not t for t in mapping.threads):
        raise ScheduleError(f"band {k}: shared tiles need every loop of the band mapped")
    if tile_k < 1 or pad < 0:
        raise ScheduleError(f"band {k}: shared tile of {tile_k} along the reduction, padding {pad}")
    regs = math.prod(mapping.work)
    if regs > spec.registers_per_thread // 2:
        raise ScheduleError(f"band {k}: {regs} accumulators per thread, more than half of the "
                            f"{spec.registers_per_thread} registers a thread has")
    # the member at position p (after the order) is op axis order[p]
    threads = {id(op.axes[mapping.order[p]]): mapping.threads[p] for p in range(n)}
    work = {id(op.axes[mapping.order[p]]): mapping.work[p] for p in range(n)}
    key = ("registers", id(op), tuple(sorted(threads.items())), tuple(sorted(work.items())), tile_k, pad)
    if cache is not None and key in cache:
        program, acc_op, final_op, copy_ops_, boxes, new_model = cache[key]
    else:
        program, acc_op, final_op, copy_ops_, boxes = register_tiles(model.program, op, threads, work, tile_k, pad)
        new_model = build_model(program, model.ctx)
        if cache is not None:
            cache[key] = (program, acc_op, final_op, copy_ops_, boxes, new_model)
    total = shared_bytes(boxes)
    if total > spec.shared_per_block:
        raise ScheduleError(f"band {k}: the shared tiles need {total} bytes of shared memory, "
                            f"the GPU allows {spec.shared_per_block} per block")
    old = {(id(s.op), s.role): s.name for s in model.statements}
    tiles = {a: threads[a] * work[a] for a in threads}
    copies = sorted((s for s in new_model.statements if any(s.op is c for c in copy_ops_)), key=lambda s: s.position)
    init = next(s for s in new_model.statements if s.op is acc_op and s.role == "init")
    update = next(s for s in new_model.statements if s.op is acc_op and s.role == "update")
    names_after = {o.name for o in after}
    final = next(s for s in new_model.statements if s.op is final_op)
    epilogue = sorted((s for s in new_model.statements if s.op.name in names_after), key=lambda s: s.position)
    upd_old = old[(id(op), "update")]
    first = [f"{tiles[id(a)]} * i{d}" for d, a in enumerate(op.axes)]  # the block's first output
    targets = {}
    for s in new_model.statements:
        if s is init:
            targets[s.name] = (old[(id(op), "init")], first)
        elif s is update:
            targets[s.name] = (upd_old, first + [f"{tile_k} * i{3 * n}"])
        elif s in copies:
            targets[s.name] = (upd_old, first + [f"{tile_k} * i{n}"])
        elif s is final:  # where the last term ran (every output has a first one)
            targets[s.name] = (upd_old, [f"i{d}" for d in range(n)] + ["0"])
        else:
            prior = next(o for o in model.statements if o.op.name == s.op.name and o.role == s.role)
            targets[s.name] = (prior.name, [f"i{d}" for d in range(len(s.iters))])
    axes = [mapping.axis(p) for p in range(n)]
    grid = [-(-op.axes[mapping.order[p]].extent // tiles[id(op.axes[mapping.order[p]])]) for p in range(n)]
    block_marks = [f"{MARK_BLOCK}.{axes[p]}.{grid[p]}" if grid[p] > 1 else None for p in range(n)]
    if not any(block_marks):  # one block: still one launch around it all (the tiles live in it)
        block_marks[0] = f"{MARK_BLOCK}.x.1"
    thread_marks = [f"{MARK_THREAD}.{axes[p]}.{mapping.threads[p]}" for p in range(n)]
    mapped = map_register_tiles(new_model, schedule, targets, k, n, mapping.order,
                                [tiles[id(op.axes[mapping.order[p]])] for p in range(n)],
                                list(mapping.threads), list(mapping.work), axes, block_marks, thread_marks,
                                init, update, copies, [final, *epilogue], apply_band, barrier)
    shared = frozenset(new_model.tensor_ids[c.output] for c in copy_ops_)
    return SharedTiles(new_model, mapped, shared, total)

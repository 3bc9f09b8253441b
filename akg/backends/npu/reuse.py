"""Vector work computed twice in one region, done once.

The statements of a tile region are mapped one at a time, and each computes its own
subexpressions: a layer norm's mean, variance and output statements each cast the same
input row to float32, and its variance and output each subtract the same mean. When a
later statement emits an instruction (or a loop of instructions over rows) identical to
one already emitted in the region, whose destination was not overwritten since and whose
sources were not written since, the later copy is dropped: the earlier result is still in
its temp. Identity is the instruction's listing text with its own loop variables renamed
by position, so the same work under fresh loop names matches.

An instruction that reads its own destination (an accumulation) is never reused, and any
item that is not a plain access record (a compound loop with its flags) ends every
reuse: only straight sequences of vector work are compared."""

from __future__ import annotations

import re


def canonical(instr) -> str:
    """An instruction's listing with the loop variables it binds renamed by depth."""
    from akg.backends.npu import isa

    def text(x, depth: int, names: list) -> str:
        if isinstance(x, isa.Loop):
            inner = names + [(x.var, f"@{depth}")]
            body = ";".join(text(y, depth + 1, inner) for y in x.body)
            return f"for @{depth} in 0..{x.trip}:[{body}]"
        s = str(x)
        for var, place in names:
            s = re.sub(rf"\b{re.escape(var)}\b", place, s)
        return s

    return text(instr, 0, [])


def _vector_only(instr) -> bool:
    from akg.backends.npu import isa

    if isinstance(instr, isa.Loop):
        return all(_vector_only(x) for x in instr.body)
    return isinstance(instr, isa.Vector)


def drop_recomputed(items: list) -> list:
    """`items` (access records `("acc", instr, reads, writes)` and compounds, in program
    order) without the vector records that repeat an earlier record's still-valid work."""
    out = []
    available: dict[str, tuple[set, set]] = {}  # canonical text -> (buffers read, written)
    for it in items:
        if not (isinstance(it, tuple) and it[0] == "acc"):
            available.clear()
            out.append(it)
            continue
        _, instr, reads, writes = it
        r = {b for b, _h in reads}
        w = {b for b, _h in writes}
        pure = _vector_only(instr) and not (r & w)
        key = canonical(instr) if pure else None
        if key is not None and key in available:
            continue  # the same result is still in its destination
        for k in [k for k, (kr, kw) in available.items() if (kr | kw) & w]:
            del available[k]
        if key is not None:
            available[key] = (r, w)
        out.append(it)
    return out


_IDENTITY = {"add": (0.0, "sum"), "max": (float("-inf"), "max"), "min": (float("inf"), "min")}


def _results(instr) -> int:
    """How many contiguous values from its destination a reduction writes, or 0."""
    from akg.backends.npu import isa

    if not isinstance(instr, isa.Vector) or instr.dst_stride is not None:
        return 0
    if instr.kind == "reduce":
        return int(instr.repeat)
    if instr.kind == "reduce_block" and int(instr.repeat) == 1:
        size = isa.DTYPES[instr.srcs[0].dtype]
        block = 32 // size
        return -(-(instr.mask or 8 * block) // block)
    return 0


def fold_initial_values(items: list) -> list:
    """`dup X, identity` ... `R = reduce(...)` ... `X = X op R` as `X = reduce(...)`: a
    reduction's result initialised to the combine's identity (0 for a sum, -inf for a max)
    and combined once with the only reduce that wrote R takes the reduce's result directly.
    Applies when nothing else touches X in between, the reduce wrote exactly the values
    combined, and R is not read again before it is rewritten."""
    from dataclasses import replace

    from akg.backends.npu import isa

    def vec(it):
        return it[1] if isinstance(it, tuple) and it[0] == "acc" and isinstance(it[1], isa.Vector) else None

    def names(slots):
        return {b for b, _h in slots}

    out = list(items)
    k = 0
    while k < len(out):
        a = vec(out[k])
        if a is None or a.kind != "dup" or int(a.repeat) != 1 or a.dst_stride is not None or \
                not isinstance(a.srcs[0], (int, float)) or isinstance(a.srcs[0], bool):
            k += 1
            continue
        x = a.dst.buffer.name
        done = False
        for c_at in range(k + 1, len(out)):
            it = out[c_at]
            if not (isinstance(it, tuple) and it[0] == "acc"):
                break
            c = vec(it)
            if c is not None and c.op in _IDENTITY and c.dst == a.dst and c.mask == a.mask and \
                    int(c.repeat) == 1 and c.dst_stride is None and len(c.srcs) == 2 and c.srcs[0] == a.dst and \
                    isinstance(c.srcs[1], isa.Ref) and all(s is None for s in c.src_strides):
                ident, reducer = _IDENTITY[c.op]
                r = c.srcs[1]
                if float(a.srcs[0]) != ident or r.buffer.name == x:
                    break
                writers = [j for j in range(k + 1, c_at) if r.buffer.name in names(out[j][3])]
                if len(writers) != 1:
                    break
                b_at = writers[0]
                b = vec(out[b_at])
                m = a.mask or 0
                if b is None or not b.op.startswith(f"reduce_{reducer}") or b.dst != r or _results(b) != m:
                    break
                if any(r.buffer.name in names(out[j][2]) for j in range(b_at + 1, c_at)):
                    break
                later = [j for j in range(c_at + 1, len(out)) if r.buffer.name in names(out[j][2]) | names(out[j][3])]
                if later and r.buffer.name not in names(out[later[0]][3]) or \
                        later and r.buffer.name in names(out[later[0]][2]):
                    break
                _, _i, reads, writes = out[b_at]
                out[b_at] = ("acc", replace(b, dst=a.dst), reads, out[k][3])
                del out[c_at]
                del out[k]
                done = True
                break
            if x in names(it[2]) | names(it[3]):
                break
        if not done:
            k += 1
    return out

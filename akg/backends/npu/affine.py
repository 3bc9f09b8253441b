"""Affine index expressions for the NPU backend's translation: a TIR integer index as a
({Var: coeff}, const) form (`_affine`; a floordiv / mod by a constant where the loops' ranges
make it affine), the per-function context the forms are taken in (loop ranges, split loops,
flattened tensors), an access's forms, and the bounds a guard tests on them."""

from __future__ import annotations

import contextvars
import math

import numpy as np

from akg.backends.npu.errors import NpuMappingError, NpuUnsupportedError


def _affine(e, where: str) -> tuple[dict, int]:
    """TIR integer expression -> ({Var: coeff}, const)."""
    from tvm import tirx

    if isinstance(e, tirx.IntImm):
        return {}, int(e.value)
    if isinstance(e, tirx.Var):
        split = (_LOOP_SPLITS.get() or {}).get(e)
        if split is not None:  # a loop split in two or reversed (`_split_divided_loops`)
            (coeffs, const), _loops = split
            return dict(coeffs), const
        return {e: 1}, 0
    if isinstance(e, (tirx.Add, tirx.Sub)):
        (ca, ka), (cb, kb) = _affine(e.a, where), _affine(e.b, where)
        sign = 1 if isinstance(e, tirx.Add) else -1
        out = dict(ca)
        for v, c in cb.items():
            out[v] = out.get(v, 0) + sign * c
        return {v: c for v, c in out.items() if c}, ka + sign * kb
    if isinstance(e, tirx.Mul):
        (ca, ka), (cb, kb) = _affine(e.a, where), _affine(e.b, where)
        if ca and cb:
            raise NpuMappingError(f"{where}: index {e} is not affine")
        if ca:
            return {v: c * kb for v, c in ca.items() if c * kb}, ka * kb
        return {v: c * ka for v, c in cb.items() if c * ka}, ka * kb
    if isinstance(e, (tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod)) and isinstance(e.b, tirx.IntImm) \
            and int(e.b.value) > 0:
        return _divided(e, _affine(e.a, where), int(e.b.value), where)
    if _reads_tensor(e):  # data-dependent indexing (a gather's or a scatter's index)
        raise NpuUnsupportedError(f"{where}: index {e} reads a tensor (data-dependent indexing is not supported "
                                  f"yet)")
    raise NpuMappingError(f"{where}: index {e} is not affine in the loops (not supported yet)")


def _reads_tensor(e) -> bool:
    """Whether an index expression loads from a tensor."""
    if _is_load(e):
        return True
    if type(e).__name__ == "Call":
        return any(_reads_tensor(a) for a in e.args)
    return any(_reads_tensor(getattr(e, k)) for k in ("a", "b", "value", "condition", "true_value", "false_value")
               if hasattr(e, k))


# the extents of the loops of the function being translated (Var -> extent), from its parse
_LOOP_RANGES: contextvars.ContextVar = contextvars.ContextVar("npu_loop_ranges", default=None)
# its region loops rewritten (Var -> ((coeffs, const), [(new Var, extent), ...])): split in two,
# v = outer * k + inner, or reversed, v = (extent - 1) - v_r
_LOOP_SPLITS: contextvars.ContextVar = contextvars.ContextVar("npu_loop_splits", default=None)


# tensors of a region read or written through a reshape of merged dims whose address is affine
# (`x[c // 25, c // 5 % 5, c % 5]` is element c of x): tensor name -> [(indices, address)]
_FLATS: contextvars.ContextVar = contextvars.ContextVar("npu_flats", default=None)


def _flat_address(acc):
    """The affine address expression of an access recorded in `_FLATS`, or None."""
    flats = _FLATS.get() or {}
    for indices, address in flats.get(_buf(acc).name, ()):
        if len(indices) == len(acc.indices) and all(a.same_as(b) for a, b in zip(indices, acc.indices)):
            return address
    return None


def _access_forms(acc, where: str) -> list:
    """The affine forms of an access's indices; a flattened tensor's (`_FLATS`) one form, its
    address."""
    address = _flat_address(acc)
    if address is not None:
        return [_affine(address, where)]
    return [_affine(i, where) for i in acc.indices]


def _index_vars(e) -> set:
    """The names of the variables in an index expression."""
    from tvm import tirx

    if isinstance(e, tirx.Var):
        return {e.name}
    out = set()
    for name in ("a", "b"):
        if hasattr(e, name):
            out |= _index_vars(getattr(e, name))
    return out


def _divided_terms(accesses, where: str):
    """(coefficients of the dividend, divisor) of each affine floordiv / floormod in the
    accesses' indices (those whose dividend is not affine are skipped; flattened accesses
    have none)."""
    for acc in accesses:
        if _flat_address(acc) is not None:
            continue
        for div in (d for idx in acc.indices for d in _divisions(idx)):
            try:
                coeffs, _k = _affine(div.a, where)
            except NpuMappingError:
                continue
            yield coeffs, int(div.b.value)


def _divisions(e) -> list:
    """The integer divisions and remainders (by a constant) in an index expression."""
    from tvm import tirx

    if isinstance(e, (tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod)):
        found = [e] if isinstance(e.b, tirx.IntImm) and int(e.b.value) > 0 else []
        return found + _divisions(e.a)
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul)):
        return _divisions(e.a) + _divisions(e.b)
    return []


def _divided(e, form: tuple[dict, int], d: int, where: str) -> tuple[dict, int]:
    """`a // d` or `a % d` of an affine `a` (the floordiv / mod of a reshape's indices) as an
    affine form where the loops' ranges make it one: a = d * q + r with q, r affine (each
    coefficient and the constant split by divmod) and r in [0, d) for every loop value, so
    a // d = q and a % d = r. `(16 * i + j) // 16` is i for j < 16; `i // 16` over i < 256 is
    refused (not affine: the loop would have to be split at multiples of 16)."""
    from tvm import tirx

    coeffs, const = form
    ranges = _LOOP_RANGES.get() or {}
    if any(v not in ranges for v in coeffs):
        raise NpuMappingError(f"{where}: index {e} divides a loop of unknown range (not supported)")
    if isinstance(e, (tirx.Div, tirx.Mod)) and const + sum(min(0, c * (ranges[v] - 1)) for v, c in coeffs.items()) < 0:
        raise NpuMappingError(f"{where}: index {e} truncates a negative value (not supported)")
    qk, rk = divmod(const, d)
    quotient = {v: c // d for v, c in coeffs.items() if c // d}
    remainder = {v: c % d for v, c in coeffs.items() if c % d}
    top = rk + sum(c * (ranges[v] - 1) for v, c in remainder.items())
    floor = isinstance(e, (tirx.FloorDiv, tirx.Div))
    if top >= d:
        # affine on the loops' ranges all the same (`(24 * i + 24) // 25` is i for i < 25, a
        # schedule's form of a merged loop): the values fitted and checked at every point
        fit = _affine_on_ranges(remainder, rk, d, {v: ranges[v] for v in remainder}, floor)
        if fit is not None:
            fc, fk = fit
            if not floor:
                return fc, fk
            merged = dict(quotient)
            for v, c in fc.items():
                merged[v] = merged.get(v, 0) + c
            return {v: c for v, c in merged.items() if c}, qk + fk
        raise NpuMappingError(f"{where}: index {e} is not affine in the loops (its remainder spans {rk}..{top}, past "
                              f"{d}: a tile that splits the divided loop at multiples of {d} would make it affine)")
    return (quotient, qk) if floor else (remainder, rk)


def _bounds_test(cond, forms: list, where: str):
    """{dim: (lo, hi)}: the bounds `lo <= forms[dim] < hi` that `cond` (a conjunction of
    comparisons of the forms with constants) tests; None when it tests anything else."""
    from tvm import tirx

    out: dict = {}
    terms, stack = [], [cond]
    while stack:
        c = stack.pop()
        if type(c).__name__ == "And":
            stack += [c.a, c.b]
        else:
            terms.append(c)
    for t in terms:
        kind = type(t).__name__
        if kind not in ("GE", "GT", "LE", "LT"):
            return None
        a, b = t.a, t.b
        if isinstance(a, tirx.IntImm) and not isinstance(b, tirx.IntImm):
            a, b = b, a
            kind = {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT"}[kind]
        if not isinstance(b, tirx.IntImm):
            return None
        try:
            form = _affine(a, where)
        except NpuMappingError:
            return None
        n = int(b.value)
        dims = [d for d, f in enumerate(forms) if _same_coeffs(f[0], form[0])]
        if len(dims) != 1:
            return None
        d = dims[0]
        shift = forms[d][1] - form[1]  # forms[d] = form + shift
        lo, hi = out.get(d, (-math.inf, math.inf))
        if kind == "GE":
            lo = max(lo, n + shift)
        elif kind == "GT":
            lo = max(lo, n + 1 + shift)
        elif kind == "LT":
            hi = min(hi, n + shift)
        else:
            hi = min(hi, n + 1 + shift)
        out[d] = (lo, hi)
    return out


AFFINE_FIT_POINTS = 1 << 16  # the most loop points `_affine_on_ranges` evaluates


def _affine_on_ranges(coeffs: dict, const: int, d: int, ranges: dict, floor: bool):
    """({Var: coeff}, const) of `(const + sum(c v)) // d` (floor) or `% d` when that is an
    affine function of the loops over their ranges (checked at every point), else None."""
    import math

    vs = list(coeffs)
    if not vs or math.prod(ranges[v] for v in vs) > AFFINE_FIT_POINTS:
        return None
    grids = np.meshgrid(*[np.arange(ranges[v], dtype=np.int64) for v in vs], indexing="ij")
    a = const + sum(coeffs[v] * g for v, g in zip(vs, grids))
    vals = a // d if floor else a % d
    base = int(vals.flat[0])
    slopes = {}
    for k, v in enumerate(vs):
        if ranges[v] > 1:
            index = [0] * len(vs)
            index[k] = 1
            slopes[v] = int(vals[tuple(index)]) - base
    fitted = base + sum(slopes.get(v, 0) * g for v, g in zip(vs, grids))
    if not np.array_equal(fitted, vals):
        return None
    return {v: c for v, c in slopes.items() if c}, base


def _is_load(e) -> bool:
    return type(e).__name__ == "TensorLoad"


def _buf(access):
    """The buffer a load (`source`) or a store (`buffer`) accesses."""
    return access.source if _is_load(access) else access.buffer


def _same_coeffs(a: dict, b: dict) -> bool:
    if len(a) != len(b):
        return False
    for v, c in a.items():
        if not any(v.same_as(w) and c == d for w, d in b.items()):
            return False
    return True

"""The UB layouts of a tile region's tensors in the NPU backend's translation: a tensor's box
in UB with its padded layout (`Local`), a tensor read through windows, strides or merged dims
laid out unfolded (`Window`), and a flattened tensor's one-dim view (`_Flat`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Local:
    """A tensor's UB buffer in one region: its box in the tensor, its padded layout."""

    name: str  # tensor buffer name
    dtype: str
    lo: list  # per dim: ({Var: coeff}, const) of the box's first element
    sizes: list
    strides: list  # UB element strides per dim
    buffer: object = None
    halves: bool = False
    slot_elems: int = 0
    moving: bool = False  # brought in per tile of a tiled reduction loop
    perm: list = None  # the tensor dims in UB order, outer to inner (None: the tensor's own);
    #                    a transposed access gets its transpose in the DMA
    view: "Window" = None  # a window dim unfolded in UB (the box's dims are the view's, `Window`)


@dataclass
class Window:
    """A tensor accessed through windows, strides or merged dims, laid out in UB unfolded: each
    such dim of the tensor, index `y*s + ry*d + k` (a convolution's or a pooling's input; the
    cube takes fp16 convs only) or `25*o + 5*a + b` (a reshape's merged dims whose rows are no
    whole 32-byte blocks), is split into its window loop `ry` (at most one; coefficient `rstep`)
    and one dim per output loop (`parts`: (loop, coefficient), outermost first), the window
    dims outermost: `UB[ry, rx, b, c, y, x] = X[b, c, y*sh + ry*dh + k, x*sw + rx*dw + l]`. Each
    window offset then starts its own aligned rows in UB, so a vector over the output positions
    starts aligned and runs contiguous whatever the offsets and strides; the GM <-> UB DMA makes
    the copies (overlapping, shifted, strided GM reads; GM strides per dim, UB strides in whole
    blocks). Loops around the region (tile loops) go with the innermost part."""

    dims: tuple  # per unfolded tensor dim: (dim, rvar or None, rstep, parts, const)

    @property
    def writable(self) -> bool:
        """Each element of the box one tensor element (no window, parts apart): a tensor written
        in the region may be laid out so."""
        return all(rvar is None for _d, rvar, *_r in self.dims)

    def same(self, other) -> bool:
        if other is None or len(self.dims) != len(other.dims):
            return False
        for (d, r, rs, parts, k), (d2, r2, rs2, parts2, k2) in zip(self.dims, other.dims):
            if (d, rs, k, len(parts)) != (d2, rs2, k2, len(parts2)) or (r is None) != (r2 is None) \
                    or r is not None and not r.same_as(r2):
                return False
            if any(c != c2 or not v.same_as(v2) for (v, c), (v2, c2) in zip(parts, parts2)):
                return False
        return True

    def forms(self, forms: list) -> list:
        """The affine forms of an access's indices over the view's dims."""
        out, windows = [], []
        unfolded = {d: (rvar, parts) for d, rvar, _rs, parts, _k in self.dims}
        for d, (coeffs, _c) in enumerate(forms):
            if d not in unfolded:
                out.append((coeffs, _c))
                continue
            rvar, parts = unfolded[d]
            if rvar is not None:
                windows.append(({rvar: 1}, 0))
            inner = parts[-1][1]
            rest = {v: c // inner for v, c in coeffs.items()
                    if not (rvar is not None and v.same_as(rvar)) and not any(v.same_as(p) for p, _c in parts)}
            out += [({v: 1}, 0) for v, _c in parts[:-1]] + [({parts[-1][0]: 1, **rest}, 0)]
        return windows + out

    def gm(self, strides: list) -> tuple[list, int]:
        """GM element strides of the view's dims (from the tensor's) and its GM offset."""
        out, windows, const = [], [], 0
        unfolded = {d: (rvar, rstep, parts, k) for d, rvar, rstep, parts, k in self.dims}
        for d, g in enumerate(strides):
            if d not in unfolded:
                out.append(g)
                continue
            rvar, rstep, parts, k = unfolded[d]
            if rvar is not None:
                windows.append(rstep * g)
            out += [c * g for _v, c in parts]
            const += k * g
        return windows + out, const


class _Flat:
    """The UB view of a flattened tensor (`_FLATS`): one dim, the element's address."""

    def gm(self, strides: list) -> tuple[list, int]:
        return [1], 0

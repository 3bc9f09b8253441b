"""Complex numbers: complex(re, im), real(x), imag(x).

complex64 lives in the graph IR and the reference interpreter only (NumPy evaluates it
natively). Kernels never see it: before lowering, `akg.graph.complex.decompose_complex`
rewrites every complex value into a (real, imaginary) pair of float32 values, so these ops
have no compute definitions of their own.
"""

from __future__ import annotations

import numpy as np

from akg.errors import ShapeError
from akg.graph.ops.registry import ELEMWISE, defop
from akg.graph.types import COMPLEX_PART, TensorType, broadcast_shapes, is_complex

_COMPLEX_OF = {part: c for c, part in COMPLEX_PART.items()}


def _complex_infer(re: TensorType, im: TensorType) -> TensorType:
    if re.dtype != im.dtype or re.dtype not in _COMPLEX_OF:
        raise ShapeError(f"needs two {' or '.join(_COMPLEX_OF)} inputs, got {re} and {im}")
    return TensorType(broadcast_shapes(re.shape, im.shape), _COMPLEX_OF[re.dtype])


def _part_infer(x: TensorType) -> TensorType:
    if not is_complex(x.dtype):
        raise ShapeError(f"needs a complex input, got {x}")
    return x.with_dtype(COMPLEX_PART[x.dtype])


@defop("complex", kind=ELEMWISE, infer=_complex_infer, differentiable=False)
def complex_(re, im):
    """re + i * im (both broadcast)."""
    out = np.empty(np.broadcast_shapes(re.shape, im.shape),
                   np.result_type(re.dtype, np.complex64))
    out.real, out.imag = re, im
    return out


@defop("real", kind=ELEMWISE, infer=_part_infer, differentiable=False)
def real(x):
    """The real part."""
    return np.ascontiguousarray(x.real)


@defop("imag", kind=ELEMWISE, infer=_part_infer, differentiable=False)
def imag(x):
    """The imaginary part."""
    return np.ascontiguousarray(x.imag)


# --- sharding rules ---------------------------------------------------------------------------

from akg.graph.ops.registry import defsharding  # noqa: E402


@defsharding("complex", "real", "imag")
def _complex_sharding(call, mesh):
    """Elementwise (see graph/ops/elementwise.py): any split; partial sums pass through
    (complex of two partials, real/imag parts of one)."""
    from akg.graph.ops.elementwise import LINEAR_INPUTS, broadcast_roles
    from akg.graph.parallel.rules import assign_roles

    return assign_roles(call, mesh, broadcast_roles(call, LINEAR_INPUTS[call.op]))

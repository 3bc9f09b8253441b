"""The op registry (`OPS`) and every op family, registered on import."""

from akg.graph.ops.registry import (  # noqa: F401
    COLLECTIVE, COMPOSITE, CONV, ELEMWISE, INDEX, KINDS, LAYOUT, LINALG, OPS, POOL, REDUCE, SHARDING_RULES,
    COMPUTES, EXPANDERS, VJP_RULES, Attr, Attrs, ComputeCtx, OpDef, defcompute, defexpand, defop, defsharding, defvjp,
    get_op,
)
from akg.graph.ops import (collective, complex, conv, elementwise, index, layout, linalg, nn, reduce,  # noqa: F401,E402
                           winograd)

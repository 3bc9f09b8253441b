"""The graph pass pipeline (graph stage, between import and kernel generation): a model Graph
through the named passes of `PASSES`, in order, to the Partition of its kernels.

    autodiff -> parallel -> complex -> storage -> expand -> simplify -> winograd -> layout -> fuse

Every step is a `GraphPass`: a name and a function of the graph and the `PlanOptions` (the
target, fusion limits). All but the last map a Graph to a Graph; "fuse", the last, cuts it
into a `Partition`. "autodiff" and "parallel" are slots: training graphs are built before
planning (`akg.graph.train`), per-rank graphs from a plan (`akg.graph.parallel.spmd`), whose
collectives the "parallel" step refuses (the multi-process runner, `akg.distributed`,
compiles the pieces between them). Tuning and compiling for one target must plan with that
same target, so that they cut the same kernels (workload keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from akg.graph.complex import decompose_complex
from akg.graph.storage import widen_storage
from akg.graph.expand import expand
from akg.graph.fuse import FusionLimits, Partition, fuse
from akg.graph.ir import Graph
from akg.graph.layout import pack_weights
from akg.graph.memory import check_model_memory
from akg.graph.simplify import simplify
from akg.graph.winograd import winograd_convs
from akg.registry import Registry


@dataclass(frozen=True)
class PlanOptions:
    """What passes may depend on besides the graph: the target (None: no target, default
    weight panels) and the size limits of a fused kernel."""

    target: Any = None
    limits: FusionLimits = FusionLimits()


@dataclass(frozen=True)
class GraphPass:
    """One named step of the pipeline: `run(graph, options)` gives the next Graph (the last
    step, fusion, the Partition)."""

    name: str
    run: Callable[[Graph, PlanOptions], Any]
    doc: str


def _identity(graph: Graph, options: PlanOptions) -> Graph:
    return graph


def _parallel(graph: Graph, options: PlanOptions) -> Graph:
    """Per-rank graphs are made by `akg.graph.parallel.spmd.spmd` from a plan; their
    collectives are no kernels, so a graph holding one stops here with the way to run it."""
    from akg.errors import UnsupportedOpError
    from akg.graph.ops.registry import COLLECTIVE

    for node in graph.nodes:
        if node.opdef.kind == COLLECTIVE:
            raise UnsupportedOpError(node.op, reason=f"it is a collective op of a per-rank SPMD graph (producing "
                                     f"%{node.outputs[0].name}), not a kernel: run the graph with "
                                     f"akg.graph.parallel.simulate, or run the whole model on processes "
                                     f"(akg run MODEL --mesh ... --processes N)")
    return graph


def _complex(graph: Graph, options: PlanOptions) -> Graph:
    return decompose_complex(graph)


def _storage(graph: Graph, options: PlanOptions) -> Graph:
    return widen_storage(graph)


def _expand(graph: Graph, options: PlanOptions) -> Graph:
    return expand(graph)


def _simplify(graph: Graph, options: PlanOptions) -> Graph:
    return simplify(graph)


def _winograd(graph: Graph, options: PlanOptions) -> Graph:
    return winograd_convs(graph, target=options.target)


def _layout(graph: Graph, options: PlanOptions) -> Graph:
    return pack_weights(graph, target=options.target)


def _fuse(graph: Graph, options: PlanOptions) -> Partition:
    return fuse(graph, options.limits)


PASSES: tuple[GraphPass, ...] = (
    GraphPass("autodiff", _identity, "slot for loss -> training graph; the identity today"),
    GraphPass("parallel", _parallel, "slot for the per-rank SPMD split (made from a plan by "
                                     "akg.graph.parallel.spmd); refuses collective ops, which are no kernels"),
    GraphPass("complex", _complex, "complex64 values -> float32 (re, im) pairs; complex inputs and "
                                   "outputs as float32 (..., 2) (akg.graph.complex)"),
    GraphPass("storage", _storage, "ops on bfloat16/float8 values computed in float32 between casts "
                                   "(akg.graph.storage)"),
    GraphPass("expand", _expand, "composite ops -> basic ops (akg.graph.expand)"),
    GraphPass("simplify", _simplify, "CSE, DCE, constant folding, identities (akg.graph.simplify)"),
    GraphPass("winograd", _winograd, "3x3 convs the target runs faster as Winograd F(2x2, 3x3): input "
                                     "transform, product, output transform (akg.graph.winograd)"),
    GraphPass("layout", _layout, "constant matmul weights stored as panels for the target, a "
                                 "computed K^T read [K, N] (akg.graph.layout.pack_weights)"),
    GraphPass("fuse", _fuse, "basic ops -> kernels, a Partition (akg.graph.fuse)"),
)

GRAPH_PASSES: Registry[GraphPass] = Registry("graph pass")
for _p in PASSES:
    GRAPH_PASSES.register(_p.name, _p)


def plan_model(graph: Graph, target=None, *, passes: Sequence[str | GraphPass] | None = None,
               limits: FusionLimits = FusionLimits()) -> Partition:
    """Run `graph` through `passes` (default `PASSES`; names or GraphPass values, in order,
    ending with "fuse") for `target`, and return the Partition of its kernels. TooLargeError
    first when the model's inputs, weights, outputs and largest tensor do not fit in memory."""
    steps = PASSES if passes is None else tuple(GRAPH_PASSES.get(p) if isinstance(p, str) else p
                                                for p in passes)
    if not steps or steps[-1].name != "fuse":
        raise ValueError(f"a plan ends with the 'fuse' pass, got {[p.name for p in steps]}")
    check_model_memory(graph)  # a model that cannot run here stops now, not when allocating
    options = PlanOptions(target, limits)
    result: Any = graph
    for step in steps:
        result = step.run(result, options)
    return result

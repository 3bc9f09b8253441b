"""The torch.compile backend (api layer): `torch.compile(model, backend="akg")`.

Dynamo hands over an FX graph; `aot_autograd` traces it to ATen with `decompositions()`
(torch's core-ATen table) and splits it into a forward and, when gradients are needed, a
backward graph. Each goes through the torch.fx importer (`akg.graph.io.torch_fx`) and
`compile_model` for the CPU; the compiled graph runs on the tensors' memory through NumPy.
A graph akg cannot convert whole runs partitioned instead, with a warning naming the node and
the op: akg compiles the runs of ops it maps, torch runs the rest; slower, never wrong. `STATS` counts what akg compiled and what fell back.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from akg.errors import AkgError

log = logging.getLogger(__name__)


@dataclass
class CompileStats:
    """What the backend did since the last `reset()`: graphs akg compiled (forward, backward,
    inference), graphs it could not compile whole (`fallbacks`, with the reasons in `reasons`)
    and the parts of those that akg compiled all the same (`partitions`)."""

    forward: int = 0
    backward: int = 0
    inference: int = 0
    fallbacks: int = 0
    partitions: int = 0  # parts of fallen-back graphs that akg compiled
    reasons: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.forward = self.backward = self.inference = self.fallbacks = self.partitions = 0
        self.reasons.clear()


STATS = CompileStats()


class AkgFallbackWarning(UserWarning):
    """A graph akg could not compile runs eagerly in torch."""


def compile_aten(gm: Any, example_inputs: list, kind: str = "inference", target: str = "cpu") -> Callable:
    """A boxed callable (it takes the list of inputs) that runs the ATen GraphModule `gm`
    compiled by akg for `target`. When akg cannot convert or compile the whole graph (an
    AkgFallbackWarning names the node and the op), the graph is partitioned: the runs of ops
    akg maps are compiled by akg, the rest runs eagerly in torch (`gm` itself when no part
    compiles). `kind` ("forward", "backward", "inference") is what STATS counts it as."""
    try:
        run = _compile_whole(gm, example_inputs, kind, target)
    except AkgError as e:
        STATS.fallbacks += 1
        STATS.reasons.append(str(e))
        message = f"akg: the {kind} graph runs eagerly in torch, but for the parts akg maps: {e}"
        log.warning(message)
        warnings.warn(message, AkgFallbackWarning, stacklevel=2)
        return _boxed(_partitioned(gm, kind, target))
    setattr(STATS, kind, getattr(STATS, kind) + 1)
    return _boxed(run)


def _compile_whole(gm: Any, example_inputs: list, kind: str, target: str) -> Callable:
    from akg.api import compile_model
    from akg.graph.io.torch_fx import import_fx

    graph, output_map = import_fx(gm, example_inputs, name=f"torch_{kind}")
    return _runner(compile_model(graph, target) if graph.outputs else None, output_map)


def _partitioned(gm: Any, kind: str, target: str) -> Any:
    """`gm` with each maximal run of nodes whose ops akg maps fused into a submodule that akg
    compiles (a submodule akg then fails on runs eagerly); `gm` itself when nothing compiles."""
    import operator

    import torch
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    from akg.graph.io.torch_fx import ATEN_OPS, op_name

    class Mapped(OperatorSupport):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and (node.target is operator.getitem or op_name(node.target) in ATEN_OPS)

    class AkgPart(torch.nn.Module):
        def __init__(self, run: Callable, single: bool):
            super().__init__()
            self.run, self.single = run, single

        def forward(self, *args):
            out = self.run(*args)
            return out[0] if self.single else tuple(out)

    try:
        partitioner = CapabilityBasedPartitioner(gm, Mapped(), allows_single_node_partition=False)
        fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    except Exception as e:  # noqa: BLE001 - torch's partitioner: then the whole graph runs in torch
        log.warning("akg: cannot partition the %s graph (%s): it runs in torch", kind, e)
        return gm
    compiled = 0
    for node in fused.graph.nodes:
        if node.op != "call_module":
            continue
        sub = getattr(fused, node.target)
        examples = [a.meta.get("val") if hasattr(a, "meta") else a for a in node.args]
        (result,) = [n.args[0] for n in sub.graph.nodes if n.op == "output"]
        try:
            run = _compile_whole(sub, examples, f"{kind}_part", target)
        except AkgError as e:
            log.warning("akg: a part of the %s graph runs in torch: %s", kind, e)
            continue
        setattr(fused, node.target, AkgPart(run, not isinstance(result, (tuple, list))))
        compiled += 1
    STATS.partitions += compiled
    if not compiled:
        return gm
    fused.recompile()
    return fused


def _runner(compiled: Any, output_map: list[tuple[str, int]]) -> Callable:
    import torch

    def run(*args: Any) -> list:
        arrays = [_to_numpy(a) for a in args]
        results = compiled(*arrays) if compiled is not None else []
        return [None if where == "none" else args[i] if where == "input"
                else torch.from_numpy(np.asarray(results[i])) for where, i in output_map]

    return run


def _to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor's memory as a C-contiguous array (no copy when it already is one)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.cpu().numpy()


def _boxed(fn: Callable) -> Callable:
    def boxed(args: list) -> Any:
        inputs = list(args)
        args.clear()  # the boxed convention: the callee owns (and frees) the inputs
        return fn(*inputs)

    boxed._boxed_call = True  # type: ignore[attr-defined]
    return boxed


def akg_backend(gm: Any, example_inputs: list, target: str = "cpu") -> Callable:
    """The dynamo backend: `torch.compile(model, backend=akg_backend)`, also registered as
    "akg". Forward and backward ATen graphs are both compiled by akg (`aot_autograd`)."""
    from torch._dynamo.backends.common import aot_autograd

    from akg.graph.io.torch_fx import decompositions

    def compiler(kind: str) -> Callable:
        return lambda g, inputs: compile_aten(g, inputs, kind, target)

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=compiler("inference"), decompositions=decompositions())
    return backend(gm, example_inputs)

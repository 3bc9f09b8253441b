"""The torch.compile backend (api layer): `torch.compile(model, backend="akg")`.

Dynamo hands over an FX graph; `aot_autograd` traces it to ATen with `decompositions()`
(torch's core-ATen table) and splits it into a forward and, when gradients are needed, a
backward graph. Each goes through the torch.fx importer (`akg.graph.io.torch_fx`) and
`compile_model` for the CPU; the compiled graph runs on the tensors' memory through NumPy.
A graph akg cannot convert runs eagerly instead, with a warning naming the node and the op:
a fallback is slower, never wrong. `STATS` counts what akg compiled and what fell back.
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
    inference) and graphs that ran eagerly (`fallbacks`, with the reasons in `reasons`)."""

    forward: int = 0
    backward: int = 0
    inference: int = 0
    fallbacks: int = 0
    reasons: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.forward = self.backward = self.inference = self.fallbacks = 0
        self.reasons.clear()


STATS = CompileStats()


class AkgFallbackWarning(UserWarning):
    """A graph akg could not compile runs eagerly in torch."""


def compile_aten(gm: Any, example_inputs: list, kind: str = "inference", target: str = "cpu") -> Callable:
    """A boxed callable (it takes the list of inputs) that runs the ATen GraphModule `gm`
    compiled by akg for `target`; `gm` itself (eager) with an AkgFallbackWarning when akg
    cannot convert or compile it. `kind` ("forward", "backward", "inference") is what STATS
    counts it as."""
    from akg.api import compile_model
    from akg.graph.io.torch_fx import import_fx

    try:
        graph, output_map = import_fx(gm, example_inputs, name=f"torch_{kind}")
        compiled = compile_model(graph, target) if graph.outputs else None
    except AkgError as e:
        STATS.fallbacks += 1
        STATS.reasons.append(str(e))
        message = f"akg: the {kind} graph runs eagerly in torch: {e}"
        log.warning(message)
        warnings.warn(message, AkgFallbackWarning, stacklevel=2)
        return _boxed(gm)
    setattr(STATS, kind, getattr(STATS, kind) + 1)
    return _boxed(_runner(compiled, output_map))


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

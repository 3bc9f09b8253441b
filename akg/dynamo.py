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
import operator
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
    and the parts of those that akg compiled all the same (`partitions`); weights compiled into
    inference graphs (`frozen`) and graphs compiled again as those weights changed (`thawed`);
    `compiled` says what each graph akg compiled whole became (`CompiledGraph`)."""

    forward: int = 0
    backward: int = 0
    inference: int = 0
    fallbacks: int = 0
    partitions: int = 0  # parts of fallen-back graphs that akg compiled
    frozen: int = 0  # weights compiled into inference graphs as constants
    thawed: int = 0  # inference graphs compiled again, weights as inputs, as their weights changed
    reasons: list[str] = field(default_factory=list)
    compiled: list[CompiledGraph] = field(default_factory=list)

    def reset(self) -> None:
        self.forward = self.backward = self.inference = self.fallbacks = self.partitions = 0
        self.frozen = self.thawed = 0
        self.reasons.clear()
        self.compiled.clear()


@dataclass(frozen=True)
class CompiledGraph:
    """One graph akg compiled whole: what STATS counts it as, its kernel calls (in order) and
    the bytes its memory plan holds at its peak."""

    kind: str
    calls: tuple[str, ...]
    peak_bytes: int


STATS = CompileStats()


class AkgFallbackWarning(UserWarning):
    """A graph akg could not compile runs eagerly in torch."""


def compile_aten(gm: Any, example_inputs: list, kind: str = "inference", target: str = "cpu",
                 frozen: dict[int, Any] | None = None) -> Callable:
    """A boxed callable (it takes the list of inputs) that runs the ATen GraphModule `gm`
    compiled by akg for `target`. When akg cannot convert or compile the whole graph (an
    AkgFallbackWarning names the node and the op), the graph is partitioned: the runs of ops
    akg maps are compiled by akg, the rest runs eagerly in torch (`gm` itself when no part
    compiles). `kind` ("forward", "backward", "inference") is what STATS counts it as.

    `frozen` (input index -> tensor) are weights compiled in as constants, so that akg folds
    and lays them out once, as it does for a model file's weights; each call checks that those
    inputs are still the same tensors, unchanged (`FrozenInputs`), and runs a graph that takes
    them as inputs when they are not (never a result of stale weights)."""
    try:
        if frozen:
            run = _compile_frozen(gm, example_inputs, kind, target, FrozenInputs(frozen))
        else:
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


def _compile_whole(gm: Any, example_inputs: list, kind: str, target: str,
                   frozen: FrozenInputs | None = None) -> Callable:
    from akg.api import compile_model
    from akg.graph.io.torch_fx import import_fx

    graph, output_map = import_fx(gm, example_inputs, name=f"torch_{kind}",
                                  frozen=frozen.arrays() if frozen else None)
    model = compile_model(graph, target) if graph.outputs else None
    if model is not None:
        STATS.compiled.append(CompiledGraph(kind, tuple(c.kernel for c in model.calls), model.plan.peak_bytes))
    return _runner(model, output_map, skip=set(frozen.values) if frozen else set())


class FrozenInputs:
    """Graph inputs compiled in as constants: the tensors, and the identity, storage and
    version counter (`_version`, which every in-place write bumps) each had when frozen."""

    def __init__(self, values: dict[int, Any]):
        import torch

        self.values = dict(values)
        self._arity = max(self.values, default=-1) + 1
        self._tensors = list(self.values.values())
        self._versions = list(map(_VERSION, self._tensors))
        # torch's C method itself, mapped over the weights: no bound method per tensor (a
        # model's 100 weights checked in ~10 us instead of ~25)
        self._data_ptr = torch._C.TensorBase.data_ptr
        self._ptrs = list(map(self._data_ptr, self._tensors))
        self._pick = _picker(list(self.values))

    def arrays(self) -> dict[int, np.ndarray]:
        """Copies of the frozen values (read outside the fake-tensor mode aot_autograd compiles in)."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            return {i: np.array(t.detach().cpu().numpy()) for i, t in self.values.items()}

    def hold(self, args: tuple) -> bool:
        """Whether `args` pass the frozen tensors (the same objects: their shapes and dtypes are
        dynamo's guards), on the same storage, unwritten. Per call, so C-level maps, no Python
        loop over the weights."""
        if len(args) < self._arity:
            return False
        passed = self._pick(args)
        return (all(map(operator.is_, passed, self._tensors)) and list(map(_VERSION, passed)) == self._versions
                and list(map(self._data_ptr, passed)) == self._ptrs)


_VERSION = operator.attrgetter("_version")


def _picker(indices: list[int]) -> Callable[[tuple], tuple]:
    """`args -> tuple(args[i] for i in indices)`, in C."""
    if len(indices) == 1:
        (i,) = indices
        return lambda args: (args[i],)
    return operator.itemgetter(*indices) if indices else (lambda args: ())


def _compile_frozen(gm: Any, example_inputs: list, kind: str, target: str, frozen: FrozenInputs) -> Callable:
    """The graph compiled with `frozen`'s weights as constants; a call whose weights are not
    those (replaced, or written in place, as an optimizer step does) runs the graph compiled
    with the weights as inputs, compiled then, and so does every later call."""
    run_frozen = _compile_whole(gm, example_inputs, kind, target, frozen)
    STATS.frozen += len(frozen.values)
    unfrozen: list[Callable] = []

    def run(*args: Any) -> list:
        if not unfrozen:  # once thawed, always: a version counter only grows
            if frozen.hold(args):
                return run_frozen(*args)
            log.info("akg: the weights of the %s graph changed since it was compiled with them in; it is compiled "
                     "again with the weights as inputs", kind)
            try:
                unfrozen.append(_compile_whole(gm, example_inputs, kind, target))
            except AkgError as e:  # compiled with constants, not with inputs: torch runs it
                log.warning("akg: the %s graph runs in torch from now on: %s", kind, e)
                unfrozen.append(lambda *a: list(gm(*a)))
            STATS.thawed += 1
        return unfrozen[0](*args)

    return run


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


def _runner(compiled: Any, output_map: list[tuple[str, int]], skip: set[int] = frozenset()) -> Callable:
    import torch

    from_numpy = torch.from_numpy

    def run(*args: Any) -> list:
        if compiled is None:
            results = []
        else:
            pick = kept.get(len(args))
            if pick is None:
                pick = kept[len(args)] = _picker([i for i in range(len(args)) if i not in skip])
            results = compiled(*map(_to_numpy, pick(args)))
        return [None if where == "none" else args[i] if where == "input"
                else from_numpy(np.asarray(results[i])) for where, i in output_map]

    kept: dict[int, Callable] = {}  # the picker of the arguments akg takes, by the number passed
    return run


def _to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor's memory as a C-contiguous array (no copy when it already is one)."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()


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

    weights = _weights(gm, example_inputs)

    def compiler(kind: str) -> Callable:
        return lambda g, inputs: compile_aten(g, inputs, kind, target)

    def inference(g: Any, inputs: list) -> Callable:
        # aot_autograd's inference graph takes dynamo's inputs in dynamo's order (unless it
        # removed duplicated arguments: then nothing is frozen)
        placeholders = sum(1 for n in g.graph.nodes if n.op == "placeholder")
        frozen = weights if placeholders == len(example_inputs) else {}
        return compile_aten(g, inputs, "inference", target, frozen=frozen)

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=inference, decompositions=decompositions())
    return backend(gm, example_inputs)


def _weights(gm: Any, example_inputs: list) -> dict[int, Any]:
    """Dynamo's graph inputs that are model state rather than arguments, by index: parameters,
    buffers, and tensors the function reads from globals or its closure. An inference graph
    compiles them in as constants."""
    import torch

    weights: dict[int, Any] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return weights
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        if not isinstance(value, torch.Tensor) or type(value).__name__ == "FakeTensor":
            continue
        grapharg = node.meta.get("grapharg")
        source = getattr(grapharg, "source", None)
        name = getattr(source, "name", "") or ""
        root = source
        while getattr(root, "base", None) is not None:
            root = root.base
        argument = (type(root).__name__ == "LocalSource" and getattr(root, "is_input", False)
                    and not getattr(root, "is_derefed_cell_contents", False))
        if (isinstance(value, torch.nn.Parameter) or "._parameters[" in name or "._buffers[" in name
                or (source is not None and not argument)):
            weights[i] = value
    return weights

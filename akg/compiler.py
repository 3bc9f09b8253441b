"""akg.compiler: one subgraph + target + config -> a compiled Kernel, through the polyhedral
pipeline (model, dependences, isl schedule), the target's mapping recipe, promotion, AST ->
TIR with the target's lowering hooks, and the target's backend. Nothing here names a target:
the recipe, hooks and backend come from the Target object (`akg.target`)."""

from __future__ import annotations

import atexit
import gc
import logging
import time
from collections import OrderedDict
from typing import Callable

import numpy as np

from akg.errors import LoweringError, ScheduleError
from akg.graph.compute.lower import Program, default_fusion, lower_graph
from akg.graph.ir import Graph
from akg.graph.subgraph import Subgraph, workload_key
from akg.kernel import Kernel, KernelStats
from akg.polyhedral.astgen import LoweringHooks, lower_to_tir
from akg.polyhedral.front import schedule_program
from akg.schedules.space import Config, Space
from akg.target import Target, get_target

log = logging.getLogger(__name__)


def _main_dtype(program: Program) -> str:
    floats = [op.output.dtype for op in program.ops() if op.output.dtype.startswith("float")]
    return max(floats, key=floats.count) if floats else "float32"


def _has_float16(program: Program) -> bool:
    tensors = [*program.placeholders, *(op.output for op in program.ops())]
    return any(t.dtype == "float16" for t in tensors)


class Pipeline:
    """The polyhedral stages for one program on one target, kept so that the tuner can ask
    for the knob space and build many configs without redoing the front end."""

    def __init__(self, program: Program, target: Target, fusion: str = "smart"):
        self.target, self.fusion = target, fusion
        self.recipe = target.recipe()
        self.program = program = self.recipe.prepare(program, _main_dtype(program))
        self.dtype = _main_dtype(program)
        self.stats = KernelStats()
        t0 = time.perf_counter()
        front = schedule_program(program, fusion, siblings=self.recipe.fuses_sibling_reductions)
        self.model, self.deps, self.schedule, self.bands = front.model, front.deps, front.schedule, front.bands
        self.stats.fallback = front.fallback
        self.stats.schedule_s = time.perf_counter() - t0
        self.stats.statements = len(self.model.statements)
        self.reciprocal = not _has_float16(program)  # x / d as x * (1 / d) for invariant d

    def space(self) -> Space:
        return self.recipe.space(self.bands, self.fusion)

    def default_config(self) -> Config:
        return self.recipe.default_config(self.bands, self.dtype, self.fusion)

    def alternative_configs(self) -> list[Config]:
        """The recipe's alternatives to the default (`Recipe.alternative_configs`)."""
        return self.recipe.alternative_configs(self.bands, self.dtype, self.fusion)

    def resolve(self, config: Config | None) -> Config:
        """`config` with `steps=None` (or None) replaced by the target's default."""
        if config is None:
            return self.default_config()
        if config.fusion != self.fusion:
            raise ScheduleError(f"config is for fusion '{config.fusion}', pipeline for '{self.fusion}'")
        return self.default_config() if config.steps is None else config

    def lower(self, config: Config):
        """The TIR PrimFunc of this program under `config` (ScheduleError if illegal), and the
        loop-nest records of its statements (for the tuner's features)."""
        config = self.resolve(config)
        t0 = time.perf_counter()
        mapped = self.recipe.apply(config, self.model, self.schedule, self.bands, self.dtype)
        model = self.model
        if isinstance(mapped, tuple):  # the recipe rewrote the statements (see Recipe.apply)
            model, mapped = mapped
        func, records = lower_to_tir(model, mapped, promote=self.recipe.promote(config),
                                     name=self.program.name, hooks=self.target.lowering(config) or LoweringHooks())
        self.stats.codegen_s = time.perf_counter() - t0
        return func, records

    def compile(self, func):
        """The target's executable of a PrimFunc lowered from this program."""
        return self.target.backend().compile(func, self.target, reciprocal=self.reciprocal)

    def build(self, config: Config | None = None, config_source: str = "default", lowered=None) -> Kernel:
        """Compile `config` (None: the default) into a Kernel; `lowered` is its (func, records)
        when the caller has lowered it already."""
        config = self.resolve(config)
        func, records = lowered if lowered is not None else self.lower(config)
        t0 = time.perf_counter()
        stats = KernelStats(**vars(self.stats))
        try:
            exe = self.compile(func)
        except LoweringError as e:
            # TVM's vectoriser can reject the Let bindings of the fast-math expansions (when it
            # falls back to scalarising a statement it visits them twice); libm calls it takes.
            if not (config.has("fast_math") and "Let cannot bind" in str(e)):
                raise
            log.debug("%s: %s; rebuilding without fast-math expansions", self.program.name, e)
            func, records = self.lower(config.without("fast_math"))
            exe = self.compile(func)
            stats.fallback = "fast-math expansions off (TVM's vectoriser rejected them)"
        stats.compile_s = time.perf_counter() - t0
        return Kernel(self.program.name, self.target, config, self.program, func, exe, stats, config_source,
                      records)


_PIPELINES: "OrderedDict[tuple, Pipeline]" = OrderedDict()


@atexit.register
def _drop_pipelines() -> None:
    # isl objects must go before the interpreter tears modules down (islpy frees them late)
    _PIPELINES.clear()
    gc.collect()


def _lowered(graph: Graph, target: Target) -> Program:
    """`graph`'s tensor expressions as `target` wants its op definitions built (its window
    phases, vector width and one-read statistics: `lower_graph`)."""
    return lower_graph(graph, target.window_phases, target.vector_bits, moments=target.one_read_moments)


def pipeline_for(graph: Graph | Subgraph, target: str | Target = "cpu", fusion: str = "smart",
                 program: Program | None = None) -> Pipeline:
    """A Pipeline for this graph, reused across calls in this process (the tuner builds many
    configs of one subgraph); `program` is the graph's lowering when the caller has it."""
    target = get_target(target)
    if isinstance(graph, Subgraph):
        graph = graph.graph
    key = (workload_key(graph), target.key, fusion)
    if key in _PIPELINES:
        _PIPELINES.move_to_end(key)
        return _PIPELINES[key]
    pipeline = Pipeline(program or _lowered(graph, target), target, fusion)
    _PIPELINES[key] = pipeline
    while len(_PIPELINES) > 32:
        _PIPELINES.popitem(last=False)
    return pipeline


ConfigChooser = Callable[[Graph, Target], "tuple[Config | None, str]"]


def build(subgraph: Subgraph | Graph | Program, target: str | Target = "cpu",
          config: Config | None = None, choose: ConfigChooser | None = None,
          program: Program | None = None) -> Kernel:
    """Compile one subgraph (of basic or composite ops) into a Kernel.

    `config=None` asks `choose(graph, target)` for a config and where it came from (the API
    layer looks it up in the tuning database), else takes the target's default heuristic
    config; the kernel says which. `program` is the subgraph's lowering, if already made.
    """
    target = get_target(target)
    t0 = time.perf_counter()
    if isinstance(subgraph, Subgraph):
        subgraph = subgraph.graph
    source = "given" if config is not None else "default"
    if config is None and choose is not None and isinstance(subgraph, Graph):
        config, source = choose(subgraph, target)
    if program is None:
        program = subgraph if isinstance(subgraph, Program) else _lowered(subgraph, target)
    lower_s = time.perf_counter() - t0
    fusion = config.fusion if config is not None else default_fusion(program)
    pipeline = Pipeline(program, target, fusion)
    pipeline.stats.lower_s = lower_s
    if config is not None and source != "given":
        try:  # a config tuned for another version of akg's schedule may no longer fit it
            pipeline.recipe.validate(pipeline.resolve(config), pipeline.bands)
        except ScheduleError as e:
            log.warning("%s: the tuning database's config no longer fits this kernel's schedule (%s); "
                        "building the default (tune it again to replace it)", program.name, e)
            config, source = None, f"default (the tuned config no longer fits: {e})"
            if fusion != default_fusion(program):
                pipeline = Pipeline(program, target, default_fusion(program))
                pipeline.stats.lower_s = lower_s
    kernel = pipeline.build(config, config_source=source)
    if isinstance(subgraph, Graph):
        from akg.graph.interpreter import index_bounds

        kernel.index_bounds = {v.name: b for v, b in index_bounds(subgraph).items() if v in set(subgraph.inputs)}
    return kernel


def compile_model(graph: Graph, target: str | Target = "cpu", choose: ConfigChooser | None = None,
                  progress=None):
    """Plan a model into kernels (`akg.graph.pipeline.plan_model`), build each distinct kernel
    once (with the config `choose` gives, else the default) and plan the intermediate buffers."""
    from akg.graph.compute.lower import kernel_params
    from akg.graph.interpreter import index_bounds
    from akg.graph.pipeline import plan_model
    from akg.runtime import CompiledModel, KernelCall, LoadedKernel, TensorSpec, plan_memory

    t0 = time.perf_counter()
    target = get_target(target)
    parts = plan_model(graph, target)
    pg = parts.graph
    specs = {v.name: TensorSpec(v.name, v.shape, v.dtype) for v in pg.values}
    built: dict[str, LoadedKernel] = {}
    calls = []
    for i, fk in enumerate(parts.kernels):
        key = fk.subgraph.workload_key
        if key not in built:
            # lowered once: built, and its weights bound
            program = _lowered(fk.subgraph.graph, target)
            kernel = build(fk.subgraph, target, choose=choose, program=program)
            built[key] = LoadedKernel(kernel.executable, kernel.config.to_json(), kernel.config_source, func=kernel.func)
            params = list(program.params.values())
            if progress is not None:
                progress(i, len(parts.kernels), fk, kernel)
        else:
            params = kernel_params(fk.subgraph.graph)  # this call's own weights
        calls.append(KernelCall(key, fk.name, fk.inputs, fk.outputs, params))
    consts = {v.name: np.asarray(a) for v, a in pg.constants.items()}
    needed = {n for c in calls for n in c.inputs} | {v.name for v in pg.outputs}
    constants = {k: a for k, a in consts.items() if k in needed}
    outputs = [specs[v.name] for v in pg.outputs]
    plan = plan_memory(calls, specs, keep={s.name for s in outputs})
    stats = {"kernels": len(calls), "distinct_kernels": len(built), "compile_s": time.perf_counter() - t0,
             "tuned_kernels": sum(1 for k in built.values() if k.source.startswith("tuned"))}
    bounds = {v.name: b for v, b in index_bounds(pg).items() if v in set(pg.inputs)}
    from akg.graph.complex import complex_io

    return CompiledModel(graph.name, [specs[v.name] for v in pg.inputs], outputs, specs, calls, built,
                         constants, plan, stats, bounds, target.backend().artifact_kind,
                         complex_io=complex_io(graph))

"""akg.compiler: one subgraph + target + config -> a compiled Kernel, through the polyhedral
pipeline (model, dependences, isl schedule, target mapping, promotion, AST -> TIR, backend)."""

from __future__ import annotations

import atexit
import dataclasses
import gc
import logging
import time
from collections import OrderedDict

import islpy as isl

from akg.errors import LoweringError, ScheduleError, UnsupportedError
from akg.graph.compute.lower import Program, lower_graph, split_reductions
from akg.graph.ir import Graph
from akg.graph.subgraph import Subgraph, workload_key
from akg.kernel import Kernel, KernelStats
from akg.polyhedral.astgen import lower_to_tir
from akg.polyhedral.deps import compute_dependences
from akg.polyhedral.model import build_model
from akg.polyhedral.schedule import schedule as isl_schedule
from akg.polyhedral.tree import analyze, apply_plan
from akg.schedules import cpu as cpu_mapping
from akg.schedules.space import Config, Space, make_space
from akg.target import CpuTarget, Target, get_target

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
        if isinstance(target, CpuTarget):
            program = split_reductions(program, target.vector_lanes(_main_dtype(program)))
        self.program, self.target, self.fusion = program, target, fusion
        self.stats = KernelStats()
        t0 = time.perf_counter()
        try:
            self.model = build_model(program)
            self.deps = compute_dependences(self.model)
            result = isl_schedule(self.model, self.deps, fusion)
            self.schedule = result.schedule
            self.stats.fallback = result.fallback
            self.bands = analyze(self.model, self.schedule)
        except isl.Error as e:
            raise ScheduleError(f"{program.name}: polyhedral analysis failed: {e}") from e
        self.stats.schedule_s = time.perf_counter() - t0
        self.stats.statements = len(self.model.statements)
        self.dtype = _main_dtype(program)
        self.reciprocal = not _has_float16(program)  # x / d as x * (1 / d) for invariant d

    def space(self) -> Space:
        return make_space(self.fusion, self.bands)

    def default_config(self) -> Config:
        return cpu_mapping.default_config(self.bands, self.target, self.dtype, self.fusion)

    def lower(self, config: Config):
        """The TIR PrimFunc of this program under `config` (ScheduleError if illegal), and the
        loop-nest records of its statements (for the tuner's features)."""
        if config.fusion != self.fusion:
            raise ScheduleError(f"config is for fusion '{config.fusion}', pipeline for '{self.fusion}'")
        t0 = time.perf_counter()
        plan = cpu_mapping.to_plan(config, self.bands, self.target, self.dtype)
        try:
            mapped = apply_plan(self.model, self.schedule, plan)
            func, records = lower_to_tir(self.model, mapped, promote=config.promote,
                                         name=self.program.name, fast_math=config.fast_math,
                                         reduce_bits=self._reduce_bits(config))
        except isl.Error as e:
            raise LoweringError(f"{self.program.name}: code generation failed in isl: {e}") from e
        self.stats.codegen_s = time.perf_counter() - t0
        return func, records

    def _reduce_bits(self, config: Config) -> int:
        """Vector width of the vector reductions (0: none): the CPU's vectors, when the config
        vectorises and the target lets floating-point sums be reordered."""
        if not (config.vectorize and isinstance(self.target, CpuTarget) and self.target.fast_math_reassoc):
            return 0
        return self.target.vector_bits

    def build(self, config: Config | None = None, config_source: str = "default") -> Kernel:
        config = config or self.default_config()
        func, records = self.lower(config)
        if not isinstance(self.target, CpuTarget):
            raise UnsupportedError(f"no backend for target '{self.target}' yet")
        from akg.backends.cpu import compile_cpu

        t0 = time.perf_counter()
        stats = KernelStats(**vars(self.stats))
        try:
            exe = compile_cpu(func, self.target, self.reciprocal)
        except LoweringError as e:
            # TVM's vectoriser can reject the Let bindings of the fast-math expansions (when it
            # falls back to scalarising a statement it visits them twice); libm calls it takes.
            if not (config.fast_math and "Let cannot bind" in str(e)):
                raise
            log.debug("%s: %s; rebuilding without fast-math expansions", self.program.name, e)
            func, records = self.lower(dataclasses.replace(config, fast_math=False))
            exe = compile_cpu(func, self.target, self.reciprocal)
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


def pipeline_for(graph: Graph | Subgraph, target: str | Target = "cpu", fusion: str = "smart") -> Pipeline:
    """A Pipeline for this graph, reused across calls in this process (the tuner builds many
    configs of one subgraph)."""
    target = get_target(target)
    if isinstance(graph, Subgraph):
        graph = graph.graph
    key = (workload_key(graph), target.key, fusion)
    if key in _PIPELINES:
        _PIPELINES.move_to_end(key)
        return _PIPELINES[key]
    pipeline = Pipeline(lower_graph(graph), target, fusion)
    _PIPELINES[key] = pipeline
    while len(_PIPELINES) > 32:
        _PIPELINES.popitem(last=False)
    return pipeline


def tuned_config(graph: Graph, target: Target, db) -> tuple[Config | None, str]:
    """The best recorded config of this workload on this target, and where it came from."""
    from akg.db import Database, open_database

    database = db if isinstance(db, Database) else open_database(db)
    best = database.best(workload_key(graph), target.key)
    if best is None:
        return None, "default"
    return Config.from_json(best.config), f"tuned ({best.cost * 1e6:.1f} us measured {best.timestamp:%Y-%m-%d})"


def build(subgraph: Subgraph | Graph | Program, target: str | Target = "cpu",
          config: Config | None = None, db=None) -> Kernel:
    """Compile one subgraph (of basic or composite ops) into a Kernel.

    `config=None` takes the best record of the tuning database `db` when one is given and has
    one, else the target's default heuristic config; the kernel says which.
    """
    target = get_target(target)
    t0 = time.perf_counter()
    if isinstance(subgraph, Subgraph):
        subgraph = subgraph.graph
    source = "given" if config is not None else "default"
    if config is None and db is not None and isinstance(subgraph, Graph):
        config, source = tuned_config(subgraph, target, db)
    program = subgraph if isinstance(subgraph, Program) else lower_graph(subgraph)
    lower_s = time.perf_counter() - t0
    fusion = config.fusion if config is not None else "smart"
    pipeline = Pipeline(program, target, fusion)
    pipeline.stats.lower_s = lower_s
    kernel = pipeline.build(config, config_source=source)
    if isinstance(subgraph, Graph):
        from akg.graph.interpreter import index_bounds

        kernel.index_bounds = {v.name: b for v, b in index_bounds(subgraph).items() if v in set(subgraph.inputs)}
    return kernel

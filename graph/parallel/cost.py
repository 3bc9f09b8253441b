"""The cost model of auto-parallel: what a plan costs on a cluster, per op and per edge.

- Devices are rooflines (`ClusterSpec`: peak FLOP/s, memory bandwidth, memory), or tuned
  kernel times where a database holds them for an op at its local shapes (`KernelTimes`).
- Devices that are processes on one host share its cores (`shared_cores`): a pipeline keeps
  fewer of them busy at once, and its compute runs faster than with every device busy.
- Rooflines take the rate a kernel of its size achieves where the cluster has measured curves
  (small kernels run below the peak), charge `call_s` per kernel started, and count only the
  memory traffic that survives fusion: an elementwise or layout op reads its inputs from
  registers when another op made them and writes its output only when something other than
  an elementwise op reads it (`fused_traffic`).
- Collectives cost alpha + beta * bytes moved per mesh axis, with the intra-node (NVLink-class)
  or inter-node (network) alpha/beta as `Mesh.intra_node` says for that axis. As NCCL runs
  them (`library="nccl"`): all-reduce alpha + beta 2(n-1)/n B, all-gather / reduce-scatter /
  all-to-all alpha + beta (n-1)/n B (B the larger of the local buffers before and after),
  send/recv alpha + beta B; where a ring's messages cost latency of their own, `message_alpha`
  per message adds 2(n-1) of them to an all-reduce and n-1 to the others (zero in the GPU
  presets: the formulas above), and a send's latency may be measured apart (`p2p_alpha`).
  As gloo on CPUs runs them (`library="gloo"`, the `host` preset and akg.distributed): no
  reduce-scatter or all-to-all, so the first is an all-reduce of the whole buffer and the
  second a gather of every rank's whole buffer.
- Resharding an edge costs the sum of its `reshard` steps.
- A training step's roles (`StepRoles`): forward nodes (ancestors of the loss), backward,
  and the optimizer update (`update.*`/`new.*`, graph/train's names) run once per step;
  per-device memory is every input (parameters, optimizer state, data) plus activations the
  backward pass keeps plus gradients awaiting the update, each at its local size.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Protocol, Sequence

from akg.errors import InputError
from akg.graph.ir import Graph, Node, Value
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.reshard import Step, reshard
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.strategy import OpCall, Strategy, local_attrs
from akg.graph.types import TensorType

GiB = 1 << 30
LIBRARIES = ("nccl", "gloo")


def _rate(curve, work: float, default: float) -> float:
    """The rate at `work`, interpolated in log-log between measured (work, rate) points, the
    ends held beyond them; `default` without a curve."""
    if not curve:
        return default
    if work <= curve[0][0] or work >= curve[-1][0]:  # the ends held, exactly
        return curve[0][1] if work <= curve[0][0] else curve[-1][1]
    import numpy as np

    xs = [math.log(w) for w, _ in curve]
    ys = [math.log(r) for _, r in curve]
    return math.exp(float(np.interp(math.log(work), xs, ys)))


@dataclass(frozen=True)
class ClusterSpec:
    """Devices and links as numbers. Alphas in seconds, betas in seconds per byte (per device:
    1 / the bandwidth one device gets), flops in FLOP/s, bandwidth in bytes/s, memory in bytes."""

    name: str
    peak_flops: float
    mem_bandwidth: float
    memory: float
    devices_per_node: int = 8
    intra_alpha: float = 5e-6
    intra_beta: float = 1 / 150e9
    inter_alpha: float = 20e-6
    inter_beta: float = 1 / 12.5e9
    note: str = ""
    library: str = "nccl"  # how collectives run: "nccl" or "gloo" (see the module docstring)
    message_alpha: float = 0.0  # latency per ring message on top of a collective's alpha
    p2p_alpha: float | None = None  # a send/recv's latency where it is not alpha + message_alpha
    call_s: float = 0.0  # seconds to start one kernel (a GPU launch, a compiled call on a host)
    shared_cores: int = 0  # devices are processes sharing this many cores (0: each has its own)
    flops_curve: tuple[tuple[float, float], ...] = ()  # (FLOPs of a kernel, FLOP/s it achieves), measured
    bandwidth_curve: tuple[tuple[float, float], ...] = ()  # (bytes a kernel moves, bytes/s it achieves)

    def __post_init__(self):
        if self.library not in LIBRARIES:
            raise InputError(f"cluster '{self.name}': unknown collective library '{self.library}' "
                             f"(known: {', '.join(LIBRARIES)})")

    def alpha_beta(self, intra: bool) -> tuple[float, float]:
        return (self.intra_alpha, self.intra_beta) if intra else (self.inter_alpha, self.inter_beta)

    def flop_rate(self, flops: float) -> float:
        """FLOP/s a kernel of `flops` achieves: the measured curve at that size, else the peak."""
        return _rate(self.flops_curve, flops, self.peak_flops)

    def byte_rate(self, nbytes: float) -> float:
        """Bytes/s a kernel moving `nbytes` achieves: the measured curve, else the bandwidth."""
        return _rate(self.bandwidth_curve, nbytes, self.mem_bandwidth)

    def with_network(self, gbits: float) -> "ClusterSpec":
        """The same cluster with `gbits` Gb/s of inter-node bandwidth per device."""
        return replace(self, name=f"{self.name.split('@')[0]}@{gbits:g}Gb", inter_beta=8 / (gbits * 1e9))

    def describe(self) -> str:
        return (f"{self.name}: {self.peak_flops / 1e12:g} TFLOP/s, {self.mem_bandwidth / 1e9:g} GB/s, "
                f"{self.memory / GiB:g} GiB per device, {self.devices_per_node} per node, "
                f"intra {1 / self.intra_beta / 1e9:g} GB/s alpha {self.intra_alpha * 1e6:g} us, "
                f"inter {8 / self.inter_beta / 1e9:g} Gb/s alpha {self.inter_alpha * 1e6:g} us"
                + (f" ({self.note})" if self.note else ""))


def a100(network_gbits: float = 100.0) -> ClusterSpec:
    """An A100-80GB node: 312 TFLOP/s fp16, 2 TB/s HBM, NVLink 3 (~150 GB/s per direction
    as NCCL measures a ring), `network_gbits` per device between nodes."""
    return ClusterSpec("a100", 312e12, 2.0e12, 80 * GiB, 8, 5e-6, 1 / 150e9, 20e-6, 8 / (network_gbits * 1e9),
                       note="datasheet numbers")


def h100(network_gbits: float = 100.0) -> ClusterSpec:
    """An H100-SXM node: 990 TFLOP/s fp16 dense, 3.35 TB/s, NVLink 4 (~300 GB/s)."""
    return ClusterSpec("h100", 990e12, 3.35e12, 80 * GiB, 8, 4e-6, 1 / 300e9, 20e-6, 8 / (network_gbits * 1e9),
                       note="datasheet numbers")


@functools.lru_cache(maxsize=1)
def host() -> ClusterSpec:
    """This machine, measured roughly once (a NumPy matmul and a large copy; a few tenths of a
    second): one device per core, shared memory between them as the intra-node link and a
    loopback TCP-like network (gloo) between nodes."""
    import numpy as np

    a = np.ones((512, 512), np.float32)
    t = time.perf_counter()
    for _ in range(4):
        a @ a
    flops = 4 * 2 * 512 ** 3 / max(time.perf_counter() - t, 1e-9)
    big = np.ones(1 << 23, np.float32)
    out = np.empty_like(big)
    t = time.perf_counter()
    for _ in range(4):
        np.copyto(out, big)
    bw = 4 * 2 * big.nbytes / max(time.perf_counter() - t, 1e-9)
    cores = os.cpu_count() or 1
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / cores
    except (ValueError, OSError, AttributeError):
        mem = 4 * GiB
    return ClusterSpec("host", flops / cores, bw / cores, mem, cores, 30e-6, 1 / (bw / 4), 100e-6, 1 / 1e9,
                       note=f"measured: NumPy matmul and copy over {cores} cores; gloo latencies guessed",
                       library="gloo", message_alpha=100e-6, call_s=5e-6, shared_cores=cores)


CLUSTERS = {"a100": a100, "h100": h100, "host": host}


def cluster(name: str) -> ClusterSpec:
    """A preset by name: `a100`, `h100`, `host`; `a100@25` for 25 Gb/s between nodes."""
    base, _, gbits = name.partition("@")
    if base not in CLUSTERS:
        raise InputError(f"unknown cluster preset '{base}' (known: {', '.join(CLUSTERS)}; "
                         f"'@<Gb/s>' sets the inter-node bandwidth, e.g. a100@25)")
    spec = CLUSTERS[base]()
    if gbits:
        try:
            g = float(gbits.lower().removesuffix("gb"))
        except ValueError:
            g = -1.0
        if not (g > 0 and math.isfinite(g)):
            raise InputError(f"bad network bandwidth in cluster '{name}': write e.g. a100@25 (Gb/s)")
        spec = spec.with_network(g)
    return spec


# --- collectives --------------------------------------------------------------------------------


def collective_time(op: str, nbytes: float, n: int, c: ClusterSpec, intra: bool) -> float:
    """Seconds for one collective of `op` among `n` devices on a buffer of `nbytes` (the
    larger of the local buffers before and after), as `c.library` runs it: alpha per call,
    `c.message_alpha` per ring message, beta per byte each device sends."""
    if n <= 1 or op in ("shard_slice", "mark_partial"):
        return 0.0
    alpha, beta = c.alpha_beta(intra)
    if op in ("send", "recv", "send_recv"):
        return (alpha + c.message_alpha if c.p2p_alpha is None else c.p2p_alpha) + beta * nbytes
    if c.library == "gloo" and op == "reduce_scatter":  # no reduce-scatter: an all-reduce of the whole
        op = "all_reduce"
    if op == "all_reduce":
        return alpha + c.message_alpha * 2 * (n - 1) + beta * 2 * (n - 1) / n * nbytes
    if c.library == "gloo" and op == "all_to_all":  # no all-to-all: a gather of every rank's whole buffer
        return alpha + c.message_alpha * (n - 1) + beta * (n - 1) * nbytes
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return alpha + c.message_alpha * (n - 1) + beta * (n - 1) / n * nbytes
    raise InputError(f"no cost for collective '{op}'")


def local_bytes(t: TensorType, s: Sharding, mesh: Mesh) -> int:
    return TensorType(s.local_shape(t.shape, mesh), t.dtype).nbytes


@functools.lru_cache(maxsize=4096)
def intra_node(mesh: Mesh, axis: str) -> bool:
    """`mesh.intra_node([axis])`, remembered (a mesh of 1024 devices has many groups)."""
    return mesh.intra_node([axis])


def step_time(step: Step, t: TensorType, mesh: Mesh, c: ClusterSpec) -> float:
    if not step.communicates:
        return 0.0
    nbytes = max(local_bytes(t, step.before, mesh), local_bytes(t, step.after, mesh))
    return collective_time(step.op, nbytes, mesh.axis_size(step.axis), c, intra_node(mesh, step.axis))


# --- kernel times -------------------------------------------------------------------------------


class KernelTimes(Protocol):
    """Measured kernel times: seconds for an op at its local types, or None when unknown."""

    def time(self, call: OpCall) -> float | None: ...


@dataclass
class DatabaseTimes:
    """The best `ok` record of a tuning database for a one-op workload at the local shapes
    (ops that expand into several kernels are not found and fall back to the roofline)."""

    db: object
    target_key: str
    _cache: dict = field(default_factory=dict)

    def time(self, call: OpCall) -> float | None:
        if call not in self._cache:
            from akg.graph.builder import GraphBuilder
            from akg.graph.subgraph import workload_key

            b = GraphBuilder("workload")
            ins = [b.input(f"in{i}", t.shape, t.dtype) for i, t in enumerate(call.ins)]
            out = b.op(call.op, *ins, **call.attrs)
            b.output(*(out if isinstance(out, tuple) else (out,)))
            record = self.db.best(workload_key(b.build()), self.target_key)
            self._cache[call] = None if record is None or record.cost is None else float(record.cost)
        return self._cache[call]


def local_call(call: OpCall, s: Strategy, mesh: Mesh) -> OpCall:
    """What one device runs: the op on its pieces."""
    ins = tuple(TensorType(sh.local_shape(t.shape, mesh), t.dtype) for sh, t in zip(s.inputs, call.ins))
    outs = tuple(TensorType(sh.local_shape(t.shape, mesh), t.dtype) for sh, t in zip(s.outputs, call.outs))
    from akg.graph.ops import get_op

    return OpCall(call.op, ins, outs, get_op(call.op).check_attrs(local_attrs(call, s)))


FUSED_KINDS = ("elementwise", "layout")  # fuse into the kernel of a neighbour: start none of their own


def starts_kernel(op: str) -> bool:
    """Whether `op` is a kernel of its own after fusion (contractions, reductions, pools,
    gathers, composites): elementwise and layout ops fuse into a neighbour, collectives are none."""
    from akg.graph.ops import get_op

    return get_op(op).kind not in (*FUSED_KINDS, "collective")


Moves = tuple[tuple[bool, ...], tuple[bool, ...]]  # per input, per output: whether it crosses memory


def fused_traffic(graph: Graph) -> dict[int, Moves]:
    """Per fused (elementwise or layout) node, by id: which of its inputs it reads from memory
    (graph inputs and constants; a value another op made reaches it fused, in registers) and
    which outputs it writes (those read by an op that is not fused with it, and graph outputs).
    Nodes that start kernels are absent: they read and write every operand."""
    from akg.graph.ops import get_op

    fused = {id(n) for n in graph.nodes if get_op(n.op).kind in FUSED_KINDS}
    sources = {*graph.inputs, *graph.constants}
    escapes = set(graph.outputs)
    for n in graph.nodes:
        if id(n) not in fused:
            escapes.update(n.inputs)
    return {id(n): (tuple(v in sources for v in n.inputs), tuple(v in escapes for v in n.outputs))
            for n in graph.nodes if id(n) in fused}


def compute_time(call: OpCall, s: Strategy, mesh: Mesh, c: ClusterSpec, kernels: KernelTimes | None = None,
                 moves: Moves | None = None) -> float:
    """Seconds one device spends on its piece of `call`: a tuned time when known, else the
    roofline max(flops / rate, bytes / rate) at the rates a kernel of its size achieves, the
    bytes those `moves` says cross memory (all without it), plus `c.call_s` if it starts a
    kernel."""
    from akg.graph.ops import get_op

    lc = local_call(call, s, mesh)
    if kernels is not None:
        t = kernels.time(lc)
        if t is not None:
            return t
    if get_op(call.op).kind == "collective":
        return 0.0
    flops = get_op(call.op).count_flops(lc.ins, lc.outs, lc.attrs)
    ins, outs = moves or ((True,) * len(lc.ins), (True,) * len(lc.outs))
    nbytes = sum(t.nbytes for t, m in zip(lc.ins, ins) if m) + sum(t.nbytes for t, m in zip(lc.outs, outs) if m)
    roof = max(flops / c.flop_rate(flops) if flops else 0.0, nbytes / c.byte_rate(nbytes) if nbytes else 0.0)
    return roof + (c.call_s if starts_kernel(call.op) else 0.0)


# --- the roles of a training step --------------------------------------------------------------

UPDATE_PREFIXES = ("update.", "new.")


@dataclass
class StepRoles:
    """Per node: forward (an ancestor of the loss), backward, or update (once per step);
    per value: whether the backward pass keeps it (a forward value a backward node reads) or
    it waits for the update (a gradient an update node reads)."""

    forward: set[int]
    update: set[int]
    kept: set[str]
    waiting: set[str]

    @classmethod
    def of(cls, graph: Graph) -> "StepRoles":
        training = any(v.name.startswith("new.") for v in graph.outputs)
        if not training:
            return cls({id(n) for n in graph.nodes}, set(), set(), set())
        loss = graph.outputs[0]
        needed, forward = {loss}, set()
        for n in reversed(graph.nodes):
            if any(v in needed for v in n.outputs):
                forward.add(id(n))
                needed.update(n.inputs)
        update = {id(n) for n in graph.nodes if id(n) not in forward and n.outputs[0].name.startswith(UPDATE_PREFIXES)}
        producer = {v: n for n in graph.nodes for v in n.outputs}
        kept, waiting = set(), set()
        for n in graph.nodes:
            if id(n) in forward:
                continue
            for v in n.inputs:
                p = producer.get(v)
                if p is None:
                    continue
                if id(p) in forward and id(n) not in update:
                    kept.add(v.name)
                elif id(n) in update and id(p) not in update:
                    waiting.add(v.name)
        return cls(forward, update, kept, waiting)

    def per_step(self, node: Node) -> bool:
        return id(node) in self.update


# --- one plan, priced --------------------------------------------------------------------------


@dataclass
class Collective:
    """One priced resharding step on an edge, for --explain."""

    value: str
    consumer: str
    step: Step
    seconds: float


@dataclass
class Prediction:
    """The model's numbers for a plan: `step_time` (seconds per training step), its parts,
    per-device `memory` (bytes, the worst stage) and its parts, and the collectives per node."""

    step_time: float
    compute: float
    communication: float
    memory: float
    memory_parts: dict[str, float]
    collectives: dict[str, list[Collective]] = field(default_factory=dict)
    stage_times: list[float] = field(default_factory=list)  # per stage: one microbatch's work
    stage_updates: list[float] = field(default_factory=list)  # per stage: its once-a-step work

    def as_dict(self) -> dict:
        return {"step_time": self.step_time, "compute": self.compute, "communication": self.communication,
                "memory": self.memory, **{f"memory.{k}": v for k, v in self.memory_parts.items()},
                "stage_times": list(self.stage_times), "stage_updates": list(self.stage_updates)}


def reshard_time(src: Sharding, dst: Sharding, t: TensorType, mesh: Mesh, c: ClusterSpec) -> float:
    if src == dst:
        return 0.0
    return sum(step_time(s, t, mesh, c) for s in reshard(src, dst, t.shape, mesh))


def busy_factor(c: ClusterSpec, devices: int, stages: int, microbatches: int) -> float:
    """The factor on a pipeline's compute where devices share cores (`c.shared_cores`; the
    cluster's rates are those with every device busy): 1F1B keeps min(stages, microbatches)
    of `stages` stages busy at once, so fewer processes share the cores. 1 where devices have
    cores of their own or nothing is pipelined."""
    if not c.shared_cores or stages <= 1:
        return 1.0
    busy = devices * min(stages, microbatches) / stages
    return max(1.0, busy / c.shared_cores) / max(1.0, devices / c.shared_cores)


def pipeline_time(stage_mb: Sequence[float], stage_step: Sequence[float], microbatches: int) -> float:
    """1F1B: the microbatches stream through the stages; the slowest stage sets the pace,
    the others fill and drain once; then the per-step work (gradient sync, update)."""
    if not stage_mb:
        return 0.0
    return sum(stage_mb) + (microbatches - 1) * max(stage_mb) + max(stage_step)


def in_flight(stage: int, stages: int, microbatches: int) -> int:
    """Microbatches whose activations stage `stage` holds at once under 1F1B."""
    return max(1, min(stages - stage, microbatches))


def edge_sources(graph: Graph, plan) -> dict[Value, Sharding]:
    """The sharding every value is produced in under `plan`."""
    out: dict[Value, Sharding] = {}
    for v in (*graph.inputs, *graph.constants):
        out[v] = plan.sharding_of_input(v.name, v.type.rank)
    for n in graph.nodes:
        s = plan.strategy(n)
        out.update(zip(n.outputs, s.outputs))
    return out


def output_sharding(graph: Graph, plan, v: Value) -> Sharding:
    """Where a graph output is delivered: `new.X` in the sharding of input X (the step feeds
    it back), else as the plan says (replicated by default)."""
    if v.name.startswith("new."):
        return plan.sharding_of_input(v.name[len("new."):], v.type.rank)
    return plan.sharding_of_output(v.name, v.type.rank)


@dataclass
class Charge:
    """One cost of a plan: the compute of a node, or a resharding (or pipeline send) of a
    value for the consumers that read it in one layout, charged to the first of them (whose
    stage it runs in); `once`: per step (the update), else per microbatch."""

    node: Node | None
    seconds: float
    once: bool
    kind: str  # "compute" | "reshard" | "p2p"
    value: str = ""
    steps: tuple = ()  # (Step, seconds) of a resharding


def charges(graph: Graph, plan, c: ClusterSpec, kernels: KernelTimes | None = None, roles: StepRoles | None = None,
            stage_of: dict[str, int] | None = None):
    """Every cost of `plan`, in graph order. A value read by several consumers in the same
    layout is resharded once (per microbatch, or per step for the update's reads)."""
    from akg.graph.parallel.plan import node_key

    mesh = plan.mesh
    roles = roles or StepRoles.of(graph)
    src = edge_sources(graph, plan)
    producer = {v: n for n in graph.nodes for v in n.outputs}
    traffic = fused_traffic(graph)
    done: set = set()
    p2p_intra = intra_node(mesh, plan.pp_axis) if plan.pp_axis else True
    for n in graph.nodes:
        s = plan.strategy(n)
        once = roles.per_step(n)
        yield Charge(n, compute_time(OpCall.of(n), s, mesh, c, kernels, traffic.get(id(n))), once, "compute")
        for v, want in zip(n.inputs, s.inputs):
            if (v, want, once) not in done:
                done.add((v, want, once))
                steps = _priced(src[v], want, v, mesh, c)
                if steps:
                    yield Charge(n, sum(t for _, t in steps), once, "reshard", v.name, tuple(steps))
            p = producer.get(v)
            if stage_of is not None and p is not None:
                here = stage_of.get(node_key(n), 0)
                if stage_of.get(node_key(p), 0) != here and (v, want, once, here) not in done:
                    done.add((v, want, once, here))
                    yield Charge(n, collective_time("send_recv", local_bytes(v.type, want, mesh), 2, c, p2p_intra),
                                 once, "p2p", v.name)
    for v in graph.outputs:
        want = output_sharding(graph, plan, v)
        if (v, want, True) in done:
            continue
        done.add((v, want, True))
        steps = _priced(src[v], want, v, mesh, c)
        if steps:
            yield Charge(producer.get(v), sum(t for _, t in steps), True, "reshard", v.name, tuple(steps))


def _priced(src: Sharding, dst: Sharding, v: Value, mesh: Mesh, c: ClusterSpec) -> list[tuple[Step, float]]:
    if src == dst:
        return []
    return [(st, step_time(st, v.type, mesh, c)) for st in reshard(src, dst, v.shape, mesh)]


def evaluate(graph: Graph, plan, c: ClusterSpec, kernels: KernelTimes | None = None,
             roles: StepRoles | None = None) -> Prediction:
    """Price `plan` for `graph` on cluster `c`: per stage the compute of its nodes (on shared
    cores: `busy_factor`) and the resharding of the values they read (from another stage: a
    send/recv over the pipeline axis), per microbatch except the update's; 1F1B over the
    stages; memory per stage with the activations of its in-flight microbatches."""
    from akg.graph.parallel.plan import node_key

    roles = roles or StepRoles.of(graph)
    stages = plan.stages or [[node_key(n) for n in graph.nodes]]
    stage_of = {k: i for i, keys in enumerate(stages) for k in keys}
    m = max(1, plan.microbatches)
    ns = len(stages)
    busy = busy_factor(c, plan.mesh.size, ns, m)
    mb, per_step = [0.0] * ns, [0.0] * ns
    compute = comm = 0.0
    collectives: dict[str, list[Collective]] = {}
    for ch in charges(graph, plan, c, kernels, roles, stage_of if ns > 1 else None):
        st = stage_of.get(node_key(ch.node), 0) if ch.node is not None else 0
        seconds = ch.seconds * (busy if ch.kind == "compute" else 1.0)
        (per_step if ch.once else mb)[st] += seconds
        total = seconds * (1 if ch.once else m)
        if ch.kind == "compute":
            compute += total
        else:
            comm += total
            who = node_key(ch.node) if ch.node is not None else "<output>"
            for step, seconds in ch.steps:
                if step.communicates:
                    collectives.setdefault(who, []).append(Collective(ch.value, who, step, seconds))
    total = pipeline_time(mb, per_step, m) if ns > 1 else mb[0] * m + per_step[0]
    memory, parts = stage_memory(graph, plan, roles, stages, edge_sources(graph, plan))
    return Prediction(total, compute, comm, memory, parts, collectives, stage_times=mb if ns > 1 else [],
                      stage_updates=per_step if ns > 1 else [])


def stage_memory(graph: Graph, plan, roles: StepRoles, stages: list[list[str]], src: dict[Value, Sharding]
                 ) -> tuple[float, dict[str, float]]:
    """Per-device bytes of the fullest stage: its inputs (parameters, optimizer state, data)
    at their local sizes, the activations it keeps for backward times its in-flight
    microbatches, and the gradients waiting for its update."""
    from akg.graph.parallel.plan import node_key

    mesh = plan.mesh
    m = max(1, getattr(plan, "microbatches", 1))
    stage_of = {k: i for i, keys in enumerate(stages) for k in keys}
    ns = len(stages)
    inputs = [set() for _ in range(ns)]
    kept, waiting = [0.0] * ns, [0.0] * ns
    sources = {*graph.inputs, *graph.constants}
    for n in graph.nodes:
        st = stage_of.get(node_key(n), 0)
        for v in n.inputs:
            if v in sources:
                inputs[st].add(v)
        for v in n.outputs:
            b = local_bytes(v.type, src[v], mesh)
            if v.name in roles.kept:
                kept[st] += b
            if v.name in roles.waiting:
                waiting[st] += b
    best, parts = -1.0, {}
    for i in range(ns):
        params = sum(local_bytes(v.type, src[v], mesh) for v in inputs[i])
        acts = kept[i] * in_flight(i, ns, m)
        total = params + acts + waiting[i]
        if total > best:
            best, parts = total, {"inputs": float(params), "activations": float(acts), "gradients": float(waiting[i])}
    return best, parts

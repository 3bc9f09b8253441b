"""The integer program of the auto-parallel search (graph/parallel/search.py builds it).

Variables: x[c, j] binary, class c takes choice j (a strategy of a class of tied nodes, a
sharding of a class of graph inputs); per edge class with several layouts on both ends,
e[c, u, w] in [0, 1] for "the value leaves in layout u and is read in layout w". The
constraints sum_j x[c, j] = 1 and, per edge, sum_w e[u, w] = the x of the producer's
choices giving u and sum_u e[u, w] = the x of the consumer's choices reading w make e the
product of the two choices (Alpa's linearisation, exact at integral x). Objective: compute
of every op plus resharding of every edge, each times how often it runs (microbatches,
repeats of the layer); memory per device as one linear constraint.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from akg.errors import NoPlanError, ShardingError
from akg.graph.ir import Graph, Node, Value
from akg.graph.parallel.cost import (ClusterSpec, KernelTimes, StepRoles, compute_time, fused_traffic, in_flight,
                                     local_bytes, reshard_time)
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import node_key
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.strategy import OpCall, Strategy, strategies

log = logging.getLogger(__name__)

# ops that choose their layout in the program; the others follow their largest input (a
# batched matmul too: attention's scores and context follow the layout of the queries)
ANCHOR_OPS = ("matmul", "dense", "conv2d", "gather", "scatter_add", "one_hot")
FOLLOW_ABOVE = 200  # classes with a choice: above this many, light ops follow their inputs
TIME_SCALE = 1e3
MIP_GAP = 1e-4  # HiGHS stops within this fraction of the optimum (a binding memory row branches)
EXACT_SECONDS = 5.0  # the memory-constrained program after the Lagrangian one, at most this long
TIE = 1e-9  # seconds: costs this close are equal to a follower  # objective in milliseconds
MEMORY_SCALE = 1 / (1 << 30)  # memory row in GiB


@dataclass
class Klass:
    """Units tied to one choice: nodes at one position of repeated segments, or inputs."""

    kind: str  # "node" | "source"
    rep: Node | Value
    choices: list  # Strategy for nodes, Sharding for sources
    members: list = field(default_factory=list)
    cost: np.ndarray | None = None  # per choice, seconds (weighted, all members)
    memory: np.ndarray | None = None  # per choice, bytes per device (all members)
    root: int = -1  # the class whose choice decides this one's (itself unless it follows)
    follow: list[int] | None = None  # per choice of the root: this class's choice


@dataclass
class Group:
    """Values of one class read by the same consumers: the layouts they leave in
    (`src_idx[j]`: of the producer's choice j), per reader its layouts (`dst_idx[j]`: of the
    reader's choice j; reader None: a fixed output layout), `cost[u, w]` all together."""

    cs: int
    src_idx: list[int]
    cost: np.ndarray
    reads: list[tuple[int | None, list[int]]]


class Problem:
    def __init__(self, graph: Graph, mesh: Mesh, sub: Mesh, cluster: ClusterSpec, roles: StepRoles, segs,
                 pinned: dict[str, Sharding], *, pp: int = 1, microbatches: int = 1,
                 kernels: KernelTimes | None = None, seg_weight: list[tuple[float, float]] | None = None,
                 follow: bool | None = None):
        self._t0 = time.perf_counter()
        self.graph, self.mesh, self.sub, self.cluster = graph, mesh, sub, cluster
        self.roles, self.segs, self.pinned = roles, segs, pinned
        self.pp, self.m = pp, microbatches
        self.kernels = kernels
        self.w_mb, self.w_step = float(microbatches + pp - 1), 1.0
        # per segment, the weights of its per-microbatch and per-step work (default: w_mb, w_step)
        self.seg_weight = seg_weight
        self._reshard: dict = {}
        self._strategies: dict[OpCall, list[Strategy]] = {}
        self.classes: list[Klass] = []
        self.of_unit: dict = {}
        self._build_classes()
        self._price_units()
        if follow is None:  # small programs are solved whole; large ones with following
            follow = sum(len(k.choices) > 1 for k in self.classes) > FOLLOW_ABOVE
        if follow:
            self._follow()
        else:
            for ci, k in enumerate(self.classes):
                k.root, k.follow = ci, list(range(len(k.choices)))
        self.groups: list[Group] = []
        self._price_edges()
        self.stats: dict = {}

    # --- classes ----------------------------------------------------------------------------

    def _class_key(self, unit) -> tuple:
        segs = self.segs
        if isinstance(unit, Node):
            s = segs.of_node[id(unit)]
            return (segs.klass[s], "n", segs.local_index[id(unit)])
        s = segs.of_source.get(unit.name)
        return ("g", unit.name) if s is None else (segs.klass[s], "s", segs.source_index[unit.name])

    def _node_choices(self, node: Node) -> list[Strategy]:
        call = OpCall.of(node)
        if call not in self._strategies:
            self._strategies[call] = strategies(call, self.sub)
        found = self._strategies[call]
        pins = [(i, self.pinned[v.name]) for i, v in enumerate(node.outputs) if v.name in self.pinned]
        if pins:
            found = [s for s in found if all(s.outputs[i] == p for i, p in pins)]
            if not found:
                i, p = pins[0]
                raise ShardingError(f"no strategy of '{node.op}' produces %{node.outputs[i].name} as {p} "
                                    f"on {self.sub}")
        return found

    def _source_choices(self, v: Value) -> list[Sharding]:
        from akg.graph.parallel.search import source_choices

        if v.name in self.pinned:
            return [self.pinned[v.name]]
        return source_choices(v.type, self.sub)

    def _build_classes(self) -> None:
        index: dict[tuple, int] = {}
        units = [*self.graph.inputs, *self.graph.constants, *self.graph.nodes]
        for u in units:
            key = self._class_key(u)
            if key not in index:
                index[key] = len(self.classes)
                if isinstance(u, Node):
                    self.classes.append(Klass("node", u, self._node_choices(u)))
                else:
                    self.classes.append(Klass("source", u, self._source_choices(u)))
            c = index[key]
            self.classes[c].members.append(u)
            self.of_unit[id(u)] = c

    # --- costs of choices -------------------------------------------------------------------

    def _price_units(self) -> None:
        roles, mesh, pp = self.roles, self.mesh, self.pp
        flight = in_flight(0, pp, self.m) / pp
        traffic = fused_traffic(self.graph)
        for k in self.classes:
            n = len(k.members)
            if k.kind == "source":
                k.cost = np.zeros(len(k.choices))
                k.memory = np.array([n * local_bytes(k.rep.type, s, mesh) / pp for s in k.choices], float)
                continue
            node = k.rep
            w = sum(self._weight(u, roles.per_step(node)) for u in k.members)
            call = OpCall.of(node)
            moves = traffic.get(id(node))
            k.cost = np.array([w * compute_time(call, s, mesh, self.cluster, self.kernels, moves) for s in k.choices])
            mem = np.zeros(len(k.choices))
            for i, v in enumerate(node.outputs):
                factor = (flight if v.name in roles.kept else 0.0) + (1 / pp if v.name in roles.waiting else 0.0)
                if factor:
                    mem += [n * factor * local_bytes(v.type, s.outputs[i], mesh) for s in k.choices]
            k.memory = mem

    def _follow(self) -> None:
        """Light ops follow the layout of their largest input (Alpa's following): their
        choice is the cheapest strategy given the layout that input's producer leaves it in
        (its compute plus resharding that input; near-ties to a strategy reading it as it
        is), so only the heavy ops (matmuls, convolutions, lookups), ops whose output is
        larger than any input (broadcasts) and the graph inputs are choices of the program."""
        producer = {v: (n, i) for n in self.graph.nodes for i, v in enumerate(n.outputs)}
        for ci, k in enumerate(self.classes):
            k.root, k.follow = ci, list(range(len(k.choices)))
            if k.kind != "node" or k.rep.op in ANCHOR_OPS or len(k.choices) == 1:
                continue
            node = k.rep
            lead = max(range(len(node.inputs)), key=lambda i: (node.inputs[i].type.size, -i))
            v = node.inputs[lead]
            if v.type.size < max(o.type.size for o in node.outputs):
                continue  # a broadcast (or a scalar's use) chooses its own layout
            if v in producer:
                p, out = producer[v]
                leader = self.classes[self.of_unit[id(p)]]
            else:
                leader, out = self.classes[self.of_unit[id(v)]], 0
            if leader is k:
                continue
            best: dict[Sharding, int] = {}
            follow = []
            for j in leader.follow:
                u = self._out_layout(leader, out, j)
                if u not in best:
                    price = [k.cost[c] + self._rt(u, k.choices[c].inputs[lead], v.type) for c in range(len(k.choices))]
                    low = min(price)  # near-ties (within a nanosecond) go to a strategy reading u as it is
                    best[u] = min((c for c in range(len(k.choices)) if price[c] <= low + TIE),
                                  key=lambda c: (k.choices[c].inputs[lead] != u, c))
                follow.append(best[u])
            k.root, k.follow = leader.root, follow

    def _weight(self, unit, per_step: bool) -> float:
        """How much `unit`'s work counts: per microbatch or once per step (the update), by
        default the same in every segment."""
        if self.seg_weight is None:
            return self.w_step if per_step else self.w_mb
        if isinstance(unit, Node):
            s = self.segs.of_node[id(unit)]
        else:
            s = self.segs.of_source.get(unit.name) or 0
        mb, step = self.seg_weight[s]
        return step if per_step else mb

    def _rt(self, src: Sharding, dst: Sharding, t) -> float:
        key = (src, dst, t)
        if key not in self._reshard:
            self._reshard[key] = reshard_time(src, dst, t, self.mesh, self.cluster)
        return self._reshard[key]

    def _price_edges(self) -> None:
        """Group the values of each class by their consumers; per group the layouts it
        leaves in (U), is read in (W) and the resharding cost of each pair."""
        graph, roles = self.graph, self.roles
        producer = {v: (n, i) for n in graph.nodes for i, v in enumerate(n.outputs)}
        reads: dict[Value, dict[str, list]] = defaultdict(lambda: {"mb": [], "step": []})
        for n in graph.nodes:
            kind = "step" if roles.per_step(n) else "mb"
            for i, v in enumerate(n.inputs):
                reads[v][kind].append((self.of_unit[id(n)], i))
        sources = {x.name for x in (*graph.inputs, *graph.constants)}
        for v in graph.outputs:
            target = v.name[len("new."):] if v.name.startswith("new.") else None
            if target is not None and target in sources:
                reads[v]["step"].append((self.of_unit[id(graph.value(target))], "sink"))
            else:
                reads[v]["step"].append((("fixed", self.pinned.get(v.name, Sharding.replicated(v.type.rank))), "out"))
        groups: dict[tuple, list[Value]] = defaultdict(list)
        for v, by_kind in reads.items():
            if v in producer:
                p, k = producer[v]
                cs = self.of_unit[id(p)]
            else:
                cs, k = self.of_unit[id(v)], 0
            for kind, consumers in by_kind.items():
                if consumers:
                    groups[(cs, k, kind, tuple(sorted(set(consumers), key=repr)))].append(v)
        for (cs, k, kind, consumers), values in groups.items():
            v0 = values[0]
            weight = sum(self._weight(producer[v][0] if v in producer else v, kind == "step") for v in values)
            kc = self.classes[cs]  # layouts per choice of the root classes (followers map)
            us, src_idx = _unique([self._out_layout(kc, k, j) for j in kc.follow])
            reads_of = []
            for cd, i in consumers:
                if isinstance(cd, tuple):
                    reads_of.append((None, [cd[1]]))
                else:
                    kd = self.classes[cd]
                    reads_of.append((kd.root, [kd.choices[j] if i == "sink" else kd.choices[j].inputs[i]
                                               for j in kd.follow]))
            ws, _ = _unique([w for _, layouts in reads_of for w in layouts])
            cost = np.array([[weight * self._rt(a, b, v0.type) for b in ws] for a in us])
            if not cost.any():
                continue
            where = {w: x for x, w in enumerate(ws)}
            self.groups.append(Group(kc.root, src_idx, cost, [(cd, [where[w] for w in layouts]) for cd, layouts in reads_of]))

    @staticmethod
    def _out_layout(k: Klass, out: int, j: int) -> Sharding:
        c = k.choices[j]
        return c if k.kind == "source" else c.outputs[out]

    # --- solving ----------------------------------------------------------------------------

    def solve(self, budget: float, time_limit: float = 120.0) -> tuple[dict, dict, float]:
        """(node key -> Strategy, source name -> Sharding, objective seconds); NoPlanError
        when no choice fits `budget` bytes per device."""
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

        roots = [ci for ci, k in enumerate(self.classes) if k.root == ci]
        offsets, nx = {}, 0
        for ci in roots:
            offsets[ci] = nx
            nx += len(self.classes[ci].choices)
        c, mem = np.zeros(nx), np.zeros(nx)
        for k in self.classes:  # a follower's cost and memory fall on its root's choices
            at = offsets[k.root] + np.arange(len(k.follow))
            np.add.at(c, at, k.cost[k.follow])
            np.add.at(mem, at, k.memory[k.follow])
        floor = sum(mem[offsets[ci]:offsets[ci] + len(self.classes[ci].choices)].min() for ci in roots)
        if floor > budget:
            raise NoPlanError(f"on {self.mesh} even the leanest layout of every value needs "
                              f"{floor / (1 << 30):.2f} GiB per device, more than the {budget / (1 << 30):.2f} GiB budget")
        c *= TIME_SCALE
        mem *= MEMORY_SCALE
        rows, cols, vals, lb, ub = [], [], [], [], []
        r = 0
        for ci in roots:
            for j in range(len(self.classes[ci].choices)):
                rows.append(r), cols.append(offsets[ci] + j), vals.append(1.0)
            lb.append(1.0), ub.append(1.0)
            r += 1
        edge_cost: list[float] = []
        ne = nx

        def var(cost: float) -> int:
            nonlocal ne
            edge_cost.append(cost * TIME_SCALE)
            ne += 1
            return ne - 1

        def row(entries, lo, hi):
            nonlocal r
            for col, val in entries:
                rows.append(r), cols.append(col), vals.append(val)
            lb.append(lo), ub.append(hi)
            r += 1

        def chosen(ci: int, idx: list[int], target: int) -> list[tuple[int, float]]:
            """The x of class ci's choices whose layout index is `target`."""
            return [(offsets[ci] + j, 1.0) for j, t in enumerate(idx) if t == target]

        for g in self.groups:
            c_lin, single = c, len(g.reads) == 1
            need: dict[tuple[int, int], int] = {}

            def need_var(u: int, w: int) -> int:
                if (u, w) not in need:
                    need[u, w] = var(float(g.cost[u, w]))
                return need[u, w]

            nu = g.cost.shape[0]
            for cd, dst_idx in g.reads:
                ws = sorted(set(dst_idx))
                if cd is None or len(ws) == 1:  # the read layout is fixed: cost on the producer's x
                    w0 = ws[0]
                    for u in range(nu):
                        if g.cost[u, w0] > 0:
                            if single:
                                for col, _ in chosen(g.cs, g.src_idx, u):
                                    c_lin[col] += g.cost[u, w0] * TIME_SCALE
                            else:
                                row([(need_var(u, w0), 1.0), *((col, -1.0) for col, _ in chosen(g.cs, g.src_idx, u))],
                                    0.0, np.inf)
                elif cd == g.cs:  # the same class on both ends
                    for j, (u, w) in enumerate(zip(g.src_idx, dst_idx)):
                        if g.cost[u, w] > 0:
                            if single:
                                c_lin[offsets[cd] + j] += g.cost[u, w] * TIME_SCALE
                            else:
                                row([(need_var(u, w), 1.0), (offsets[cd] + j, -1.0)], 0.0, np.inf)
                elif nu == 1:  # the producer's layout is fixed: cost on the consumer's x
                    for w in ws:
                        if g.cost[0, w] > 0:
                            if single:
                                for col, _ in chosen(cd, dst_idx, w):
                                    c_lin[col] += g.cost[0, w] * TIME_SCALE
                            else:
                                row([(need_var(0, w), 1.0), *((col, -1.0) for col, _ in chosen(cd, dst_idx, w))],
                                    0.0, np.inf)
                else:  # e[u, w]: both ends choose
                    e = {(u, w): var(float(g.cost[u, w]) if single else 0.0) for u in range(nu) for w in ws}
                    for u in range(nu):
                        row([*((e[u, w], 1.0) for w in ws), *((col, -1.0) for col, _ in chosen(g.cs, g.src_idx, u))],
                            0.0, 0.0)
                    for w in ws:
                        row([*((e[u, w], 1.0) for u in range(nu)), *((col, -1.0) for col, _ in chosen(cd, dst_idx, w))],
                            0.0, 0.0)
                    if not single:
                        for (u, w), col in e.items():
                            if g.cost[u, w] > 0:
                                row([(need_var(u, w), 1.0), (col, -1.0)], 0.0, np.inf)
        obj = np.concatenate([c, np.array(edge_cost)]) if edge_cost else c
        mem_full = np.concatenate([mem, np.zeros(ne - nx)])
        A = coo_matrix((vals, (rows, cols)), shape=(r, ne)).tocsr()
        integrality = np.concatenate([np.ones(nx), np.zeros(ne - nx)])
        t_build = time.perf_counter() - self._t0
        t0 = time.perf_counter()
        limit = budget * MEMORY_SCALE
        solves = 0

        def run(objective, extra=None, seconds=time_limit):
            nonlocal solves
            solves += 1
            cons = [LinearConstraint(A, lb, ub)] + ([extra] if extra is not None else [])
            return milp(objective, integrality=integrality, bounds=Bounds(0, 1), constraints=cons,
                        options={"time_limit": seconds, "mip_rel_gap": MIP_GAP})

        # 1. without the memory row (fast); optimal when it fits
        res = run(obj)
        method = "exact"
        if res.x is not None and mem_full @ res.x > limit * (1 + 1e-9):
            # 2. memory priced at lam per GiB (Lagrange): the cheapest lam whose plan fits,
            # by doubling then bisection; every plan found that fits is a candidate
            best = None
            lo, hi, lam = 0.0, None, max(1e-6, abs(res.fun) / max(limit, 1e-9))
            for _ in range(40):
                trial = run(obj + lam * mem_full)
                if trial.x is None:
                    break
                fits = mem_full @ trial.x <= limit * (1 + 1e-9)
                if fits:
                    if best is None or obj @ trial.x < obj @ best:
                        best = trial.x
                    hi = lam
                else:
                    lo = lam
                if hi is None:
                    lam *= 4
                elif hi - lo <= 0.02 * hi:
                    break
                else:
                    lam = (lo + hi) / 2
            # 3. the exact program with the memory row, briefly: kept when better
            exact = run(obj, LinearConstraint(mem_full[None, :], -np.inf, limit), min(time_limit, EXACT_SECONDS))
            if exact.x is not None and (best is None or obj @ exact.x < obj @ best - 1e-12):
                best, method = exact.x, "exact (memory row)" if exact.status == 0 else "memory row, time-limited"
            else:
                method = "Lagrangian memory price" if best is not None else method
            if best is None:
                raise NoPlanError(f"no plan on {self.mesh} fits {budget / (1 << 30):.2f} GiB per device")
            res_x, fun = best, float(obj @ best)
        elif res.x is None:
            raise NoPlanError(f"no plan on {self.mesh}: {res.message}")
        else:
            res_x, fun = res.x, float(res.fun)
        self.stats = {"classes": len(self.classes), "deciding": len(roots), "choices": nx,
                      "edge_variables": ne - nx, "rows": r, "value_groups": len(self.groups),
                      "method": method, "solves": solves, "solver": "HiGHS (scipy.optimize.milp)",
                      "build_seconds": round(t_build, 3), "solve_seconds": round(time.perf_counter() - t0, 3)}
        x = res_x
        choice, inputs = {}, {}
        picked = {ci: int(np.argmax(x[offsets[ci]:offsets[ci] + len(self.classes[ci].choices)])) for ci in roots}
        for k in self.classes:
            j = k.follow[picked[k.root]]
            for u in k.members:
                if k.kind == "node":
                    choice[node_key(u)] = k.choices[j]
                else:
                    inputs[u.name] = k.choices[j]
        return choice, inputs, fun / TIME_SCALE


def _unique(items: list) -> tuple[list, list[int]]:
    out, index, where = [], [], {}
    for it in items:
        if it not in where:
            where[it] = len(out)
            out.append(it)
        index.append(where[it])
    return out, index

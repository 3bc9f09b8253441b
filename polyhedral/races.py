"""Race checking of a mapped schedule: proves that no two threads of a block touch one tensor
element between the same barriers (one of them writing), and that no two blocks of a launch
touch one element of a global tensor, with isl's exact set algebra over statement instances.

A mapping says, for every statement instance, which launch, block and thread run it and
between which barriers (`Mapping`). Accesses are the model's access relations (instance ->
element); a data-dependent access is the model's over-approximation, so the check stays
sound and may report a race that needs a more precise access to disprove. Findings:

- `write-write`: two threads of one block write one element between the same barriers;
- `missing barrier`: a thread reads an element that another thread of its block writes
  between the same barriers (either order: a read before the write is a race too);
- `inter-block`: two blocks of one launch touch one element of a global tensor, one writing
  (no barrier orders blocks, so only another mapping or an atomic update helps);
- `divergent barrier`: a barrier inside thread-mapped code that some threads of a block
  reach and others do not.

Tensors are global unless named `shared` (one copy per block) or `private` (one per thread:
never checked). Writes of statements declared atomic do not conflict with one another
(their read of the element they update is part of the atomic update).

The schedule-tree convention (`mapping_of`), with mark names read by a `roles` function
(`default_role` below; a target passes its own to read its own mark names):

- `blocks.<k>` / `threads.<k>` (`.<k>` optional, 0 by default) above a band: the band's
  members, in order, are block (thread) coordinates k, k+1, ... A statement instance under
  no mark for some coordinate is run by every value of that coordinate in its launch (as a
  statement outside a thread-bound loop is); to run it in coordinate 0 only, map a band
  member that is constantly 0 to it.
- `barrier` above a subtree: every thread of the block waits after each execution of the
  subtree; `barrier.before`: before it. A barrier below a `threads` mark must be reached by
  every thread of the block the same number of times (checked).
- `kernel` above a subtree: one launch per execution of the subtree (the loops above it run
  on the host). A tree without `kernel` marks launches each outer band (the first band on a
  path from the root) with everything below it; instances of different launches never race.
- `atomic` above a subtree: the writes of its statements are atomic read-modify-writes.

Band members under no mapping mark are loops each thread runs in order. isl's operation
quota bounds the work; a check that exceeds it, or that isl cannot do, raises
`UnprovenRaceError`, never a silent pass.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable

import islpy as isl

from akg.errors import RaceError, UnprovenRaceError

MARK_BLOCKS = "blocks"
MARK_THREADS = "threads"
MARK_BARRIER = "barrier"
MARK_BARRIER_BEFORE = "barrier.before"
MARK_KERNEL = "kernel"
MARK_ATOMIC = "atomic"

WRITE_WRITE = "write-write"
MISSING_BARRIER = "missing barrier"
INTER_BLOCK = "inter-block"
DIVERGENT_BARRIER = "divergent barrier"

DEFAULT_MAX_OPERATIONS = 20_000_000

Role = tuple[str, int]  # (MARK_BLOCKS | MARK_THREADS, first coordinate), (MARK_BARRIER, 0 before | 2 after),
#                         (MARK_KERNEL, 0), (MARK_ATOMIC, 0)


def default_role(name: str) -> Role | None:
    """What a mark means in this module's own convention (None: nothing for races)."""
    head, _, tail = name.partition(".")
    if head in (MARK_BLOCKS, MARK_THREADS):
        if not tail:
            return head, 0
        return (head, int(tail)) if tail.isdigit() else None
    if name == MARK_BARRIER:
        return MARK_BARRIER, 2
    if name == MARK_BARRIER_BEFORE:
        return MARK_BARRIER, 0
    if name in (MARK_KERNEL, MARK_ATOMIC):
        return name, 0
    return None


@dataclass(frozen=True)
class Race:
    """One conflict: its kind, the tensor, the statements (writer first) and one example
    pair of instances with the blocks and threads that run them."""

    kind: str
    tensor: str
    statements: tuple[str, ...]
    example: str

    def __str__(self) -> str:
        first, second = self.statements[0], self.statements[-1]
        if self.kind == WRITE_WRITE:
            what = (f"write-write race on {self.tensor}: {first} and {second} write one element from two "
                    "threads of a block between the same barriers")
        elif self.kind == MISSING_BARRIER:
            what = (f"missing barrier on {self.tensor}: {second} reads elements that {first} writes in "
                    "another thread of the block, with no barrier between them")
        elif self.kind == INTER_BLOCK:
            what = (f"inter-block race on {self.tensor}: {first} writes elements that {second} also "
                    "touches from another block of the launch (no barrier orders blocks)")
        else:
            what = f"divergent barrier after {', '.join(self.statements)}: some threads of a block do not reach it"
        return f"{what}; e.g. {self.example}"


@dataclass(eq=False)
class Mapping:
    """Where and when every statement instance runs. Each map goes from statement instances to
    coordinates (one anonymous space per map; a relation where an instance runs in several
    places). None: one launch / one block / one thread / no barriers.

    `phase` gives the barrier interval: two instances of one block are between the same
    barriers exactly when their phases are equal. Its domain is the instances, or the
    wrapped pairs [instance -> launch and block coordinates] when the interval depends on
    the block (what `mapping_of` gives)."""

    block: isl.UnionMap | None = None
    thread: isl.UnionMap | None = None
    phase: isl.UnionMap | None = None
    launch: isl.UnionMap | None = None
    atomic: frozenset[str] = frozenset()  # statements whose writes are atomic
    found: tuple[Race, ...] = ()  # problems of the mapping itself (divergent barriers)
    domain: isl.UnionSet | None = None  # the instances that run (None: those the accesses name)


# --- the check ----------------------------------------------------------------------------------


def find_races(writes: isl.UnionMap, reads: isl.UnionMap, mapping: Mapping, *, shared: Iterable[str] = (),
               private: Iterable[str] = (), labels: dict[str, str] | None = None,
               max_operations: int = DEFAULT_MAX_OPERATIONS) -> list[Race]:
    """Every conflict of the mapped accesses (one per kind, tensor and statement pair).
    `shared`/`private` name tensors by their isl tuple name; `labels` gives statements and
    tensors readable names for the report."""
    with _bounded(writes.get_ctx(), max_operations):
        return _Check(writes, reads, mapping, set(shared), set(private), labels or {}).run()


@contextmanager
def _bounded(ctx: isl.Context, max_operations: int):
    """isl work under an operation quota; isl's failures become UnprovenRaceError."""
    saved = ctx.get_max_operations()
    ctx.reset_operations()
    ctx.set_max_operations(max_operations)
    try:
        yield
    except isl.Error as e:
        text = str(e)
        why = "isl operation quota exceeded" if "maximal number of operations" in text else f"isl failed: {text}"
        raise UnprovenRaceError(f"cannot prove the mapping race-free: {why}") from e
    finally:
        ctx.set_max_operations(saved)
        ctx.reset_operations()


def check_races(writes: isl.UnionMap, reads: isl.UnionMap, mapping: Mapping, **kwargs) -> None:
    """Nothing when the mapping is race-free; RaceError naming the conflicts otherwise."""
    races = find_races(writes, reads, mapping, **kwargs)
    if races:
        more = f" (and {len(races) - 3} more)" if len(races) > 3 else ""
        raise RaceError("; ".join(str(r) for r in races[:3]) + more, races)


def check_schedule(model, schedule: isl.Schedule, *, shared=(), private=(),
                   roles: Callable[[str], Role | None] = default_role,
                   max_operations: int = DEFAULT_MAX_OPERATIONS) -> None:
    """check_races for a PolyModel and its mapped schedule tree; tensors may be given as
    Tensor objects or isl tuple names, and the report uses the program's names."""
    ids = model.tensor_ids
    labels = {tid: f"{t.name} ({tid})" for t, tid in ids.items() if t.name and not t.name.isdigit()}
    check_races(model.writes(), model.reads(), mapping_of(schedule, roles, max_operations),
                shared={ids.get(t, t) for t in shared}, private={ids.get(t, t) for t in private},
                labels=labels, max_operations=max_operations)


@dataclass(eq=False)
class _Stmt:
    """A statement lifted to instances [s -> g] that run in one launch and block g."""

    name: str
    domain: isl.Set
    grid: isl.Map  # [s -> g] -> g
    thread: isl.Map  # [s -> g] -> thread coordinates
    phase: isl.Map  # [s -> g] -> barrier interval
    writes: dict[str, isl.Map] = field(default_factory=dict)
    reads: dict[str, isl.Map] = field(default_factory=dict)


class _Check:
    def __init__(self, writes, reads, mapping: Mapping, shared: set[str], private: set[str], labels):
        self.mapping, self.shared, self.private, self.labels = mapping, shared, private, labels
        doms: dict[str, isl.Set] = {}
        if mapping.domain is not None:
            writes, reads = writes.intersect_domain(mapping.domain), reads.intersect_domain(mapping.domain)
        for m in _maps(writes.union(reads)):
            name = m.get_tuple_name(isl.dim_type.in_)
            doms[name] = doms[name].union(m.domain()) if name in doms else m.domain()
        self.n_launch = _width(mapping.launch)
        self.n_block = _width(mapping.block)
        self.n_thread = _width(mapping.thread)
        self.stmts = {name: self._lift(name, dom) for name, dom in sorted(doms.items())}
        for kind, umap in (("writes", writes), ("reads", reads)):
            for m in _maps(umap):
                st = self.stmts[m.get_tuple_name(isl.dim_type.in_)]
                lifted = st.domain.unwrap().domain_map().apply_range(m)
                table = getattr(st, kind)
                tid = m.get_tuple_name(isl.dim_type.out)
                table[tid] = table[tid].union(lifted) if tid in table else lifted

    def _lift(self, name: str, dom: isl.Set) -> _Stmt:
        mp = self.mapping
        grid = _part(mp.launch, name, dom, self.n_launch).flat_range_product(_part(mp.block, name, dom, self.n_block))
        lifted = grid.wrap()
        down = grid.domain_map()  # [s -> g] -> s
        thread = down.apply_range(_part(mp.thread, name, dom, self.n_thread))
        if mp.phase is None:
            phase = isl.Map.from_domain(lifted)
        elif any(s.is_wrapping() for s in _sets(mp.phase.domain())):
            phase = _one(mp.phase.intersect_domain(isl.UnionSet.from_set(lifted)), name)
        else:
            phase = down.apply_range(_part(mp.phase, name, dom, None))
        if phase is None or not lifted.is_subset(phase.domain()):
            raise UnprovenRaceError(f"cannot prove the mapping race-free: {name} has instances with no phase")
        return _Stmt(name, lifted, lifted.unwrap().range_map(), thread, phase)

    def label(self, name: str) -> str:
        return self.labels.get(name, name)

    def run(self) -> list[Race]:
        found = list(self.mapping.found)
        tensors = sorted({t for s in self.stmts.values() for t in s.writes} - self.private)
        order = {name: k for k, name in enumerate(self.stmts)}
        atomic = self.mapping.atomic
        for tid in tensors:
            writers = [s for s in self.stmts.values() if tid in s.writes]
            racing = set()  # statement pairs with a write-write race: their reads add nothing
            for s in writers:
                for t in writers:
                    if order[s.name] <= order[t.name] and not (s.name in atomic and t.name in atomic):
                        races = self._pair(tid, s, t, s.writes[tid], t.writes[tid], WRITE_WRITE)
                        racing |= {(s.name, t.name), (t.name, s.name)} if races else set()
                        found += races
            for s in writers:
                for t in self.stmts.values():
                    # an atomic update's read of the element it updates is part of the update
                    if tid in t.reads and (s.name, t.name) not in racing and not (t.name in atomic and tid in t.writes):
                        found += self._pair(tid, s, t, s.writes[tid], t.reads[tid], MISSING_BARRIER)
        return found

    def _pair(self, tid: str, s: _Stmt, t: _Stmt, acc_s: isl.Map, acc_t: isl.Map, kind: str) -> list[Race]:
        touch = acc_s.apply_range(acc_t.reverse())  # [s -> g] -> [t -> h]: one element
        if touch.is_empty():
            return []
        out = []
        nl, nb, nt = self.n_launch, self.n_block, self.n_thread
        if nt:
            same = touch.intersect(s.grid.apply_range(t.grid.reverse()))
            same = same.intersect(s.phase.apply_range(t.phase.reverse()))
            other = _relation(nt, "or", [f"a{k} != b{k}" for k in range(nt)], s.thread.get_ctx())
            pairs = s.thread.product(t.thread).intersect_domain(same.wrap()).intersect_range(other.wrap())
            if not pairs.is_empty():
                out.append(Race(kind, self.label(tid), (self.label(s.name), self.label(t.name)),
                                self._example(pairs, acc_s, acc_t, kind)))
        if nb and tid not in self.shared:
            apart = " or ".join(f"a{k} != b{k}" for k in range(nl, nl + nb))
            other = _relation(nl + nb, "and", [f"a{k} = b{k}" for k in range(nl)] + [f"({apart})"], touch.get_ctx())
            across = touch.intersect(s.grid.apply_range(other).apply_range(t.grid.reverse()))
            if not across.is_empty():
                pairs = s.thread.product(t.thread).intersect_domain(across.wrap())
                out.append(Race(INTER_BLOCK, self.label(tid), (self.label(s.name), self.label(t.name)),
                                self._example(pairs, acc_s, acc_t, kind)))
        return out

    def _example(self, pairs: isl.Map, acc_s: isl.Map, acc_t: isl.Map, kind: str) -> str:
        point = pairs.wrap().sample_point()
        whole = isl.Set.from_point(point).unwrap()  # [[s -> g] -> [t -> h]] -> [thread -> thread]
        both = whole.domain().unwrap()
        element = acc_s.intersect_domain(both.domain()).range().intersect(
            acc_t.intersect_domain(both.range()).range())
        threads = _values(whole.range().unwrap().wrap())
        nt = self.n_thread
        sides = []
        for side, thread in ((both.domain(), threads[:nt]), (both.range(), threads[nt:])):
            inst = side.unwrap()
            where = _values(inst.range())[self.n_launch:]
            text = _point_text(inst.domain()) + (f" in block {where}" if where else "")
            sides.append(text + (f" thread {thread}" if nt else ""))
        if kind == WRITE_WRITE:
            pair = f"{sides[0]} and {sides[1]} both write"
        else:
            pair = f"{sides[0]} writes and {sides[1]} reads"
        params = [f"{point.get_space().get_dim_name(isl.dim_type.param, k)} = "
                  f"{point.get_coordinate_val(isl.dim_type.param, k).to_python()}"
                  for k in range(point.get_space().dim(isl.dim_type.param))]
        tail = f" (with {', '.join(params)})" if params else ""
        tensor = self.label(element.get_tuple_name())
        return f"{pair} {tensor}{_values(element)}{tail}"


# --- the schedule-tree convention ---------------------------------------------------------------


@dataclass
class _Leaf:
    domain: isl.UnionSet
    time: list  # columns: int or UnionPwAff
    blocks: dict[int, isl.UnionPwAff]
    threads: dict[int, isl.UnionPwAff]
    launch: list  # the launch's id, then the time columns above it
    atomic: bool


@dataclass
class _Barrier:
    domain: isl.UnionSet
    depth: int  # its column in the time
    value: int  # 0: before the subtree, 2: after it
    threaded: bool
    launch: int  # the launch's id


@dataclass
class _State:
    time: list
    blocks: dict
    threads: dict
    pending: Role | None = None
    launch: list | None = None
    atomic: bool = False
    threaded: bool = False

    def but(self, **kw) -> "_State":
        base = dict(time=list(self.time), blocks=dict(self.blocks), threads=dict(self.threads),
                    pending=self.pending, launch=self.launch, atomic=self.atomic, threaded=self.threaded)
        base.update(kw)
        return _State(**base)


class _Walk:
    def __init__(self, roles: Callable[[str], Role | None]):
        self.roles = roles
        self.leaves: list[_Leaf] = []
        self.barriers: list[_Barrier] = []
        self.kernels = 0
        self.explicit = False

    def visit(self, node: isl.ScheduleNode, st: _State) -> None:
        kind = node.get_type()
        T = isl.schedule_node_type
        if st.pending is not None and kind not in (T.mark, T.band):
            raise UnprovenRaceError("cannot prove the mapping race-free: a block or thread mark above "
                                    "something other than a band")
        if kind == T.leaf:
            launch = st.launch if st.launch is not None else [-1, *st.time]
            self.leaves.append(_Leaf(node.get_domain(), st.time, st.blocks, st.threads, launch, st.atomic))
        elif kind == T.band:
            if st.launch is None and not self.explicit:
                st = st.but(launch=[self._kernel(), *st.time])
            mupa = node.band_get_partial_schedule()
            members = [mupa.get_at(d) for d in range(node.band_n_member())]
            if st.pending is None:
                st = st.but(time=st.time + members)
            else:
                what, first = st.pending
                coords = dict(st.blocks if what == MARK_BLOCKS else st.threads)
                coords.update({first + d: m for d, m in enumerate(members)})
                st = st.but(pending=None, **{"blocks" if what == MARK_BLOCKS else "threads": coords},
                            threaded=st.threaded or what == MARK_THREADS)
            self.visit(node.child(0), st)
        elif kind in (T.sequence, T.set):
            if kind == T.set and any(self._role(m) and self._role(m)[0] == MARK_BARRIER for m in _marks(node)):
                raise UnprovenRaceError("cannot prove the mapping race-free: a barrier below a set node "
                                        "(its children run in no fixed order)")
            for k in range(node.n_children()):
                self.visit(node.child(k), st.but(time=st.time + [k]))
        elif kind == T.mark:
            role = self._role(node)
            if role is None:
                self.visit(node.child(0), st)
            elif role[0] in (MARK_BLOCKS, MARK_THREADS):
                if st.pending is not None:
                    raise UnprovenRaceError(f"cannot prove the mapping race-free: two mapping marks above one band "
                                            f"({node.mark_get_id().get_name()})")
                self.visit(node.child(0), st.but(pending=role))
            elif role[0] == MARK_BARRIER:
                launch = st.launch[0] if st.launch is not None else -1
                self.barriers.append(_Barrier(node.get_domain(), len(st.time), role[1], st.threaded, launch))
                self.visit(node.child(0), st.but(time=st.time + [1]))
            elif role[0] == MARK_KERNEL:
                self.visit(node.child(0), st.but(launch=[self._kernel(), *st.time]))
            elif role[0] == MARK_ATOMIC:
                self.visit(node.child(0), st.but(atomic=True))
            else:
                self.visit(node.child(0), st)
        elif kind in (T.domain, T.filter, T.context, T.guard):
            for k in range(node.n_children()):
                self.visit(node.child(k), st)
        else:
            raise UnprovenRaceError(f"cannot prove the mapping race-free: a schedule node of type {kind} "
                                    "(extension or expansion) is not analysed")

    def _role(self, node) -> Role | None:
        return self.roles(node.mark_get_id().get_name())

    def _kernel(self) -> int:
        self.kernels += 1
        return self.kernels - 1


def mapping_of(schedule: isl.Schedule, roles: Callable[[str], Role | None] = default_role,
               max_operations: int = DEFAULT_MAX_OPERATIONS) -> Mapping:
    """The Mapping a schedule tree's marks describe (the convention in the module docstring)."""
    with _bounded(schedule.get_ctx(), max_operations):
        return _mapping_of(schedule, roles)


def _mapping_of(schedule: isl.Schedule, roles: Callable[[str], Role | None]) -> Mapping:
    walk = _Walk(roles)
    root = schedule.get_root()
    walk.explicit = any((roles(m.mark_get_id().get_name()) or ("",))[0] == MARK_KERNEL for m in _marks(root))
    walk.visit(root, _State([], {}, {}))
    ctx = root.get_ctx()
    leaves = [(leaf, s) for leaf in walk.leaves for s in _sets(leaf.domain)]
    width = max((len(leaf.time) for leaf, _ in leaves), default=0)
    launch_width = max((len(leaf.launch) for leaf, _ in leaves), default=0)
    nb = max((max(leaf.blocks) + 1 for leaf, _ in leaves if leaf.blocks), default=0)
    nt = max((max(leaf.threads) + 1 for leaf, _ in leaves if leaf.threads), default=0)
    # the values each coordinate takes in each launch id, for instances that no mark places
    extent: dict[tuple, isl.Set] = {}
    for leaf, s in leaves:
        for what, coords in (("b", leaf.blocks), ("t", leaf.threads)):
            for k, upa in coords.items():
                key = (leaf.launch[0], what, k)
                vals = _column(upa, s).range()
                extent[key] = extent[key].union(vals) if key in extent else vals

    def coords(leaf, s, what, table, n):
        cols = []
        for k in range(n):
            if k in table:
                cols.append(table[k])
            else:
                vals = extent.get((leaf.launch[0], what, k))
                cols.append(vals.simple_hull() if vals is not None else 0)
        return _row(cols, s)

    launch = block = thread = time = isl.UnionMap.empty(isl.Space.params_alloc(ctx, 0))
    pieces = []
    for leaf, s in leaves:
        lmap = _row(_pad(leaf.launch, launch_width), s)
        bmap, tmap = coords(leaf, s, "b", leaf.blocks, nb), coords(leaf, s, "t", leaf.threads, nt)
        grid = lmap.flat_range_product(bmap)
        # time: the launch and block, then the leaf's columns (an instance's own loops)
        when = grid.range_map().flat_range_product(grid.domain_map().apply_range(_row(_pad(leaf.time, width), s)))
        pieces.append((s, grid, leaf))
        launch, block, thread, time = (u.union(isl.UnionMap.from_map(m))
                                       for u, m in ((launch, lmap), (block, bmap), (thread, tmap), (time, when)))
    n_grid = _width(launch) + nb
    events = None
    divergent: list[Race] = []
    for bar in walk.barriers:
        under = time.intersect_domain(_lifted_under(pieces, bar.domain))
        if under.is_empty():
            continue
        ev = _truncate(under, n_grid + bar.depth, bar.value)  # [s -> g] -> the barrier's time
        whole = isl.Set.from_union_set(ev.range())
        events = whole if events is None else events.union(whole)
        if bar.threaded and nt:
            divergent += _divergence(pieces, ev, thread, bar, nt)
    phase = _phase(time, events, n_grid + width)
    atomic = frozenset(s.get_tuple_name() for leaf, s in leaves if leaf.atomic)
    return Mapping(block=block, thread=thread, phase=phase, launch=launch, atomic=atomic, found=tuple(divergent),
                   domain=schedule.get_domain())


def _lifted_under(pieces, domain: isl.UnionSet) -> isl.UnionSet:
    out = None
    for s, grid, _ in pieces:
        part = grid.intersect_domain(_restrict(domain, s)).wrap()
        u = isl.UnionSet.from_set(part)
        out = u if out is None else out.union(u)
    return out


def _restrict(domain: isl.UnionSet, s: isl.Set) -> isl.Set:
    found = [x for x in _sets(domain) if x.get_tuple_name() == s.get_tuple_name()]
    return s.intersect(found[0]) if found else isl.Set.empty(s.get_space())


def _truncate(time: isl.UnionMap, keep: int, value: int) -> isl.UnionMap:
    """Each instance's time cut after `keep` dims, then `value`, then zeros."""
    out = isl.UnionMap.empty(time.get_space())
    for m in _maps(time):
        n = m.dim(isl.dim_type.out)
        m = m.project_out(isl.dim_type.out, keep, n - keep).add_dims(isl.dim_type.out, n - keep)
        for d in range(keep, n):
            m = m.fix_val(isl.dim_type.out, d, isl.Val.int_from_si(m.get_ctx(), value if d == keep else 0))
        out = out.union(isl.UnionMap.from_map(m))
    return out


def _phase(time: isl.UnionMap, events: isl.Set | None, n: int) -> isl.UnionMap:
    """Each lifted instance -> [1, the last barrier before it], or [0, 0...] with none before."""
    ctx = time.get_ctx()
    zero = isl.Set(f"{{ [{', '.join(['0'] * (n + 1))}] }}", context=ctx)
    one = isl.Set("{ [1] }", context=ctx)
    out = isl.UnionMap.empty(time.get_space())
    for m in _maps(time):
        dom = m.domain()
        if events is not None:
            before = isl.Map.lex_gt(isl.Space.set_alloc(ctx, 0, n)).intersect_range(events)
            last = m.apply_range(before).lexmax()
            tagged = isl.Map.from_domain_and_range(last.domain(), one).flat_range_product(last)
            out = out.union(isl.UnionMap.from_map(tagged))
            dom = dom.subtract(last.domain())
        if not dom.is_empty():
            out = out.union(isl.UnionMap.from_map(isl.Map.from_domain_and_range(dom, zero)))
    return out


def _divergence(pieces, ev: isl.UnionMap, thread: isl.UnionMap, bar: _Barrier, nt: int) -> list[Race]:
    """A barrier below thread-mapped loops: some thread of a block that reaches an execution of
    it must not miss it. Threads of a block are those of its launch's thread box."""
    reached = None  # [g, thread] -> barrier time
    box = None
    for s, grid, leaf in pieces:
        if leaf.launch[0] != bar.launch:
            continue
        per = grid.domain_map().apply_range(_one(thread.intersect_domain(isl.UnionSet.from_set(s)), None))
        who = grid.range_map().flat_range_product(per)  # [s -> g] -> [g, thread]
        vals = per.range()
        box = vals if box is None else box.union(vals)
        mine = _one(ev.intersect_domain(isl.UnionSet.from_set(grid.wrap())), None)
        if mine is None:
            continue
        r = who.reverse().apply_range(mine)
        reached = r if reached is None else reached.union(r)
    if reached is None:
        return []
    n_g = reached.dim(isl.dim_type.in_) - nt
    hull = _box(box)
    same = _relation(n_g + nt, "and", [f"a{k} = b{k}" for k in range(n_g)], reached.get_ctx())
    blocks = reached.domain().project_out(isl.dim_type.set, n_g, nt)
    everyone = blocks.flat_product(hull)
    expected = same.intersect_domain(everyone).apply_range(reached)
    missed = expected.subtract(reached)
    if missed.is_empty():
        return []
    p = _values(isl.Set.from_point(missed.wrap().sample_point()).unwrap().domain())
    stmts = tuple(sorted(x.get_tuple_name() for x in _sets(bar.domain)))
    return [Race(DIVERGENT_BARRIER, "", stmts, f"thread {p[n_g:]} of block {p[:n_g]} misses an execution of it")]


def _box(vals: isl.Set) -> isl.Set:
    """The smallest box around a set of coordinates."""
    n = vals.dim(isl.dim_type.set)
    out = None
    for d in range(n):
        one = vals.project_out(isl.dim_type.set, d + 1, n - d - 1).project_out(isl.dim_type.set, 0, d).simple_hull()
        one = isl.Set.from_basic_set(one) if isinstance(one, isl.BasicSet) else one
        out = one if out is None else out.flat_product(one)
    return out


# --- isl helpers --------------------------------------------------------------------------------


def _maps(umap: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    umap.foreach_map(out.append)
    return out


def _sets(uset: isl.UnionSet) -> list[isl.Set]:
    out: list[isl.Set] = []
    uset.foreach_set(out.append)
    return out


def _marks(node: isl.ScheduleNode) -> list[isl.ScheduleNode]:
    out = []

    def visit(n):
        if n.get_type() == isl.schedule_node_type.mark:
            out.append(n)
        for k in range(n.n_children()):
            visit(n.child(k))

    visit(node)
    return out


def _width(umap: isl.UnionMap | None) -> int:
    if umap is None:
        return 0
    dims = {m.dim(isl.dim_type.out) for m in _maps(umap)}
    if len(dims) > 1:
        raise UnprovenRaceError(f"cannot prove the mapping race-free: coordinates of different widths {sorted(dims)}")
    return dims.pop() if dims else 0


def _anonymous(m: isl.Map) -> isl.Map:
    return m.reset_tuple_id(isl.dim_type.out) if m.has_tuple_id(isl.dim_type.out) else m


def _one(umap: isl.UnionMap, name: str | None) -> isl.Map | None:
    """The single map of a union map (its ranges made anonymous), None when empty."""
    found = [_anonymous(m) for m in _maps(umap)]
    if not found:
        return None
    out = found[0]
    for m in found[1:]:
        if not m.get_space().is_equal(out.get_space()):
            raise UnprovenRaceError(f"cannot prove the mapping race-free: {name or 'a statement'} maps to "
                                    "coordinates of several spaces")
        out = out.union(m)
    return out


def _part(umap: isl.UnionMap | None, name: str, dom: isl.Set, width: int | None) -> isl.Map:
    """The statement's part of a mapping, on its whole domain (0-dim coordinates when none)."""
    if umap is None:
        return isl.Map.from_domain(dom)
    m = _one(umap.intersect_domain(isl.UnionSet.from_set(dom)), name)
    if m is None or not dom.is_subset(m.domain()):
        raise UnprovenRaceError(f"cannot prove the mapping race-free: {name} has instances the mapping does not place")
    return m


def _column(col, s: isl.Set) -> isl.Map:
    if isinstance(col, int):
        return isl.Map.from_domain_and_range(s, isl.Set(f"{{ [{col}] }}", context=s.get_ctx()))
    if isinstance(col, (isl.Set, isl.BasicSet)):  # any value of the set
        return isl.Map.from_domain_and_range(s, isl.Set.from_basic_set(col) if isinstance(col, isl.BasicSet) else col)
    return isl.Map.from_union_map(isl.UnionMap.from_union_pw_aff(col).intersect_domain(isl.UnionSet.from_set(s)))


def _row(cols: list, s: isl.Set) -> isl.Map:
    out = isl.Map.from_domain(s)
    for c in cols:
        out = out.flat_range_product(_column(c, s))
    return out


def _pad(cols: list, width: int) -> list:
    return list(cols) + [0] * (width - len(cols))


def _relation(n: int, join: str, conds: list[str], ctx) -> isl.Map:
    a = ", ".join(f"a{k}" for k in range(n))
    b = ", ".join(f"b{k}" for k in range(n))
    body = f" : {f' {join} '.join(conds)}" if conds else ""
    return isl.Map(f"{{ [{a}] -> [{b}]{body} }}", context=ctx)


def _values(s: isl.Set) -> list[int]:
    p = s.sample_point()
    return [int(p.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(s.dim(isl.dim_type.set))]


def _point_text(s: isl.Set) -> str:
    return f"{s.get_tuple_name()}{_values(s)}"

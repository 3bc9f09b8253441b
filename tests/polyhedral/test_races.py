"""polyhedral/races.py: the race checker proves mapped schedules race-free and names the
statements, tensor and an example pair of a planted race or missing barrier."""

import re
import time

import islpy as isl
import pytest

from akg.errors import RaceError, ScheduleError, UnprovenRaceError
from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph
from akg.polyhedral import tree
from akg.polyhedral.front import schedule_program
from akg.polyhedral.races import (DIVERGENT_BARRIER, INTER_BLOCK, MISSING_BARRIER, WRITE_WRITE, Mapping,
                                  check_races, check_schedule, find_races, mapping_of)


def _program(build):
    b = GraphBuilder("g")
    build(b)
    return schedule_program(lower_graph(b.build()))


def _umap(ctx, text):
    return isl.UnionMap(text, context=ctx)


def _kinds(races):
    return sorted((r.kind, r.statements) for r in races)


# --- hand-written mappings over a model's accesses ----------------------------------------------


def test_elementwise_with_one_element_per_thread_is_race_free():
    sp = _program(lambda b: b.output(b.exp(b.input("x", (64, 128)))))
    m, ctx = sp.model, sp.model.ctx
    mapping = Mapping(block=_umap(ctx, "{ S0[i, j] -> [i] }"), thread=_umap(ctx, "{ S0[i, j] -> [j] }"))
    assert find_races(m.writes(), m.reads(), mapping) == []
    check_races(m.writes(), m.reads(), mapping)  # returns quietly


def test_a_statement_every_thread_runs_is_a_write_write_race():
    sp = _program(lambda b: b.output(b.exp(b.input("x", (64, 128)))))
    m, ctx = sp.model, sp.model.ctx
    # the thread coordinate dropped: every one of 4 threads runs every instance
    mapping = Mapping(block=_umap(ctx, "{ S0[i, j] -> [i] }"), thread=_umap(ctx, "{ S0[i, j] -> [t] : 0 <= t < 4 }"))
    (race,) = find_races(m.writes(), m.reads(), mapping)
    assert race.kind == WRITE_WRITE and race.statements == ("S0", "S0") and race.tensor == "T0"
    with pytest.raises(RaceError) as err:
        check_races(m.writes(), m.reads(), mapping)
    assert isinstance(err.value, ScheduleError) and err.value.races == [race]
    assert "write-write race on T0" in str(err.value) and "S0[" in str(err.value) and "thread [" in str(err.value)


def _row_sum():
    return _program(lambda b: b.output(b.sum(b.input("x", (64, 32)), axes=[1])))


def test_threads_accumulating_into_one_element_without_atomics_race():
    sp = _row_sum()
    m, ctx = sp.model, sp.model.ctx
    mapping = Mapping(block=_umap(ctx, "{ S0_init[i] -> [i]; S0[i, k] -> [i] }"),
                      thread=_umap(ctx, "{ S0_init[i] -> [0]; S0[i, k] -> [k] }"))
    races = find_races(m.writes(), m.reads(), mapping)
    assert (WRITE_WRITE, ("S0", "S0")) in _kinds(races)
    assert (WRITE_WRITE, ("S0", "S0_init")) in _kinds(races)  # the init, unordered against the updates
    ww = next(r for r in races if r.statements == ("S0", "S0"))
    assert "both write T0[" in ww.example
    # the updates declared atomic and the init behind a barrier: race-free
    phase = _umap(ctx, "{ S0_init[i] -> [0]; S0[i, k] -> [1] }")
    ok = Mapping(block=mapping.block, thread=mapping.thread, phase=phase, atomic=frozenset({"S0"}))
    assert find_races(m.writes(), m.reads(), ok) == []
    # atomic updates but no barrier after the init: still a race between init and updates
    no_barrier = Mapping(block=mapping.block, thread=mapping.thread, atomic=frozenset({"S0"}))
    assert _kinds(find_races(m.writes(), m.reads(), no_barrier)) == [(WRITE_WRITE, ("S0", "S0_init"))]


def test_blocks_sharing_a_global_element_is_an_inter_block_race():
    sp = _row_sum()
    m, ctx = sp.model, sp.model.ctx
    # the reduction axis split over 4 blocks, a thread per row in each: the blocks update one row sum
    mapping = Mapping(block=_umap(ctx, "{ S0_init[i] -> [0]; S0[i, k] -> [floor(k / 8)] }"),
                      thread=_umap(ctx, "{ S0_init[i] -> [i]; S0[i, k] -> [i] }"),
                      atomic=frozenset({"S0"}))
    races = find_races(m.writes(), m.reads(), mapping)
    assert {r.kind for r in races} == {INTER_BLOCK}
    assert ("S0", "S0_init") in {r.statements for r in races}  # init in block 0, updates elsewhere
    blocks = re.findall(r"in block \[(\d+)\]", races[0].example)
    assert len(blocks) == 2 and blocks[0] != blocks[1]
    # the same tensor in per-block shared memory: the blocks do not share it
    assert find_races(m.writes(), m.reads(), mapping, shared={"T0"}) == []
    assert find_races(m.writes(), m.reads(), mapping, private={"T0"}) == []


# --- mappings read from a schedule tree ---------------------------------------------------------

# one launch: a tile of a shared tensor written by each thread, then read transposed by another
TILE = """{ domain: "{ W[i, j] : 0 <= i < 16 and 0 <= j < 16; R[i, j] : 0 <= i < 16 and 0 <= j < 16 }",
  child: { mark: "kernel", child: { sequence: [
    { filter: "{ W[i, j] }", child: { mark: "%(writer)s", child: { mark: "threads",
      child: { schedule: "[{ W[i, j] -> [(i)] }, { W[i, j] -> [(j)] }]" } } } },
    { filter: "{ R[i, j] }", child: { mark: "%(reader)s", child: { mark: "threads",
      child: { schedule: "[{ R[i, j] -> [(i)] }, { R[i, j] -> [(j)] }]" } } } } ] } } }"""


def _tile(writer="other", reader="other"):
    return TILE % {"writer": writer, "reader": reader}


def _tile_accesses(ctx):
    writes = _umap(ctx, "{ W[i, j] -> A[i, j]; R[i, j] -> B[i, j] }")
    reads = _umap(ctx, "{ W[i, j] -> X[i, j]; R[i, j] -> A[j, i] }")
    return writes, reads


def test_a_shared_tile_read_by_other_threads_after_a_barrier_is_race_free():
    ctx = isl.Context()
    schedule = isl.Schedule.read_from_str(ctx, _tile(writer="barrier"))
    writes, reads = _tile_accesses(ctx)
    assert find_races(writes, reads, mapping_of(schedule), shared={"A"}) == []


def test_the_same_tile_without_the_barrier_is_a_missing_barrier_naming_both_statements():
    ctx = isl.Context()
    schedule = isl.Schedule.read_from_str(ctx, _tile())
    writes, reads = _tile_accesses(ctx)
    (race,) = find_races(writes, reads, mapping_of(schedule), shared={"A"})
    assert race.kind == MISSING_BARRIER and race.statements == ("W", "R") and race.tensor == "A"
    with pytest.raises(RaceError, match=r"missing barrier on A: R reads elements that W writes"):
        check_races(writes, reads, mapping_of(schedule), shared={"A"})


# a tile loop over k: each iteration the threads load a shared tile, then read a neighbour's
# element; the next iteration's load overwrites what others may still be reading
LOOP = """{ domain: "{ L[k, t] : 0 <= k < 8 and 0 <= t < 32; C[k, t] : 0 <= k < 8 and 0 <= t < 32 }",
  child: { schedule: "[{ L[k, t] -> [(k)]; C[k, t] -> [(k)] }]", child: { sequence: [
    { filter: "{ L[k, t] }", child: { mark: "barrier",
      child: { mark: "threads", child: { schedule: "[{ L[k, t] -> [(t)] }]" } } } },
    { filter: "{ C[k, t] }", child: { mark: "%s",
      child: { mark: "threads", child: { schedule: "[{ C[k, t] -> [(t)] }]" } } } } ] } } }"""


def _loop_accesses(ctx):
    writes = _umap(ctx, "{ L[k, t] -> S[t]; C[k, t] -> Y[k, t] }")
    reads = _umap(ctx, "{ L[k, t] -> X[k, t]; C[k, t] -> S[(t + 1) mod 32] }")
    return writes, reads


def test_a_load_of_the_next_tile_needs_a_barrier_after_the_reads_of_this_one():
    ctx = isl.Context()
    writes, reads = _loop_accesses(ctx)
    sched = isl.Schedule.read_from_str(ctx, LOOP % "barrier")
    assert find_races(writes, reads, mapping_of(sched), shared={"S"}) == []
    sched = isl.Schedule.read_from_str(ctx, LOOP % "other")
    (race,) = find_races(writes, reads, mapping_of(sched), shared={"S"})
    # C[k] reads S[t + 1] while thread t + 1 already loads tile k + 1 (a write after read)
    assert race.kind == MISSING_BARRIER and race.statements == ("L", "C")
    assert "L[" in race.example and "C[" in race.example and " reads S[" in race.example


def test_a_barrier_that_only_some_threads_reach_is_reported():
    ctx = isl.Context()
    text = """{ domain: "{ P[t] : 0 <= t < 32; Q[t] : 0 <= t < 16 }", child: { mark: "threads",
      child: { schedule: "[{ P[t] -> [(t)]; Q[t] -> [(t)] }]", child: { sequence: [
        { filter: "{ P[t] }" },
        { filter: "{ Q[t] }", child: { mark: "barrier", child: { schedule: "[{ Q[t] -> [(0)] }]" } } } ] } } } }"""
    writes = _umap(ctx, "{ P[t] -> U[t]; Q[t] -> V[t] }")
    races = find_races(writes, _umap(ctx, "{ }"), mapping_of(isl.Schedule.read_from_str(ctx, text)))
    assert [r.kind for r in races] == [DIVERGENT_BARRIER]
    assert races[0].statements == ("Q",) and "thread [" in races[0].example
    assert int(races[0].example.split("thread [")[1].split("]")[0]) >= 16  # a thread with no Q
    every = text.replace("Q[t] : 0 <= t < 16", "Q[t] : 0 <= t < 32")
    assert find_races(writes, _umap(ctx, "{ }"), mapping_of(isl.Schedule.read_from_str(ctx, every))) == []


def test_launches_are_ordered_and_one_kernel_needs_its_barriers():
    ctx = isl.Context()
    body = """{ sequence: [
        { filter: "{ W[i] }", child: { mark: "threads", child: { schedule: "[{ W[i] -> [(i)] }]" } } },
        { filter: "{ R[i] }", child: { mark: "threads", child: { schedule: "[{ R[i] -> [(i)] }]" } } } ] }"""
    domain = '"{ W[i] : 0 <= i < 32; R[i] : 0 <= i < 32 }"'
    writes = _umap(ctx, "{ W[i] -> A[i]; R[i] -> B[i] }")
    reads = _umap(ctx, "{ R[i] -> A[31 - i] }")
    # no kernel marks: each outer band is its own launch, ordered after the one before
    two = isl.Schedule.read_from_str(ctx, f"{{ domain: {domain}, child: {body} }}")
    assert find_races(writes, reads, mapping_of(two)) == []
    one = isl.Schedule.read_from_str(ctx, f'{{ domain: {domain}, child: {{ mark: "kernel", child: {body} }} }}')
    assert _kinds(find_races(writes, reads, mapping_of(one))) == [(MISSING_BARRIER, ("W", "R"))]


def test_a_custom_mark_convention():
    ctx = isl.Context()
    text = """{ domain: "{ S[i, j] : 0 <= i < 8 and 0 <= j < 8 }", child: { mark: "grid.y",
      child: { schedule: "[{ S[i, j] -> [(i)] }]", child: { mark: "lane.x",
      child: { schedule: "[{ S[i, j] -> [(j)] }]" } } } } }"""
    roles = {"grid.y": ("blocks", 0), "lane.x": ("threads", 0)}.get
    mapping = mapping_of(isl.Schedule.read_from_str(ctx, text), roles)
    assert mapping.thread.is_equal(_umap(ctx, "{ S[i, j] -> [j] : 0 <= i < 8 and 0 <= j < 8 }"))
    assert mapping.block.is_equal(_umap(ctx, "{ S[i, j] -> [i] : 0 <= i < 8 and 0 <= j < 8 }"))


# --- a real schedule, mapped with the tree primitives -------------------------------------------


def _map_tiles(sp, tile, marks=("blocks", "threads")):
    def apply(node, _):
        tiled = tree.tile_band(node, (tile,) * tree.band_members(node))
        point = tree.child(tree.mark(tiled, marks[0]))
        return tree.mark(point, marks[1])
    return tree.map_outer_bands(sp.model, sp.schedule, apply)


def _matmul(n=1024):
    return _program(lambda b: b.output(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))


def test_a_tiled_matmul_mapping_is_checked_quickly():
    sp = _matmul()
    schedule = _map_tiles(sp, 32)  # blocks of 32 x 32 threads, k serial in each thread
    mapping = mapping_of(schedule)
    ctx = sp.model.ctx
    inits = isl.UnionSet("{ S0_init[i, j] : 0 <= i, j < 1024 }", context=ctx)
    assert mapping.block.intersect_domain(inits).is_equal(
        _umap(ctx, "{ S0_init[i, j] -> [floor(i / 32), floor(j / 32)] : 0 <= i, j < 1024 }"))
    assert mapping.thread.intersect_domain(inits).is_equal(
        _umap(ctx, "{ S0_init[i, j] -> [i mod 32, j mod 32] : 0 <= i, j < 1024 }"))
    start = time.perf_counter()
    check_schedule(sp.model, schedule)
    assert time.perf_counter() - start < 1.0


def test_a_matmul_whose_reduction_loop_is_mapped_to_threads_races():
    sp = _matmul(256)

    def apply(node, _):
        tiled = tree.tile_band(node, (32, 32))
        point = tree.child(tree.mark(tiled, "blocks"))  # the 32 x 32 points: serial in one thread
        update = tree.child(point).child(1).child(0)  # sequence -> filter of S0 -> k band
        return tree.mark(update, "threads")

    schedule = tree.map_outer_bands(sp.model, sp.schedule, apply)
    with pytest.raises(RaceError) as err:
        check_schedule(sp.model, schedule)
    kinds = _kinds(err.value.races)
    assert (WRITE_WRITE, ("S0", "S0")) in kinds and (WRITE_WRITE, ("S0", "S0_init")) in kinds
    assert str(err.value).startswith("write-write race on T0: S0 and S0 write one element")
    # the same updates declared atomic, behind a barrier after the (replicated) initialisation:
    # what remains is that every thread runs the initialisation
    def atomic(node, _):
        tiled = tree.tile_band(node, (32, 32))
        point = tree.child(tree.mark(tiled, "blocks"))
        seq = tree.child(point)
        init = tree.mark(seq.child(0).child(0), "barrier")  # the init's band, a barrier after it
        update = tree.parent(init, 3).child(1).child(0)  # back to the sequence, then S0's k band
        return tree.mark(tree.mark(update, "atomic"), "threads")

    schedule = tree.map_outer_bands(sp.model, sp.schedule, atomic)
    races = find_races(sp.model.writes(), sp.model.reads(), mapping_of(schedule))
    assert _kinds(races) == [(WRITE_WRITE, ("S0_init", "S0_init"))]


def test_a_matmul_with_symbolic_sizes():
    ctx = isl.Context()
    writes = _umap(ctx, "[N] -> { I[i, j] -> C[i, j] : 0 <= i, j < N; U[i, j, k] -> C[i, j] : 0 <= i, j, k < N }")
    reads = _umap(ctx, "[N] -> { U[i, j, k] -> C[i, j] : 0 <= i, j, k < N; "
                       "U[i, j, k] -> A[i, k] : 0 <= i, j, k < N; U[i, j, k] -> B[k, j] : 0 <= i, j, k < N }")
    block = _umap(ctx, "{ I[i, j] -> [floor(i / 32), floor(j / 32)]; U[i, j, k] -> [floor(i / 32), floor(j / 32)] }")
    rows = _umap(ctx, "{ I[i, j] -> [i mod 32, j mod 32]; U[i, j, k] -> [i mod 32, j mod 32] }")
    good = Mapping(block=block, thread=rows)
    start = time.perf_counter()
    assert find_races(writes, reads, good) == []
    assert time.perf_counter() - start < 1.0
    by_k = _umap(ctx, "{ I[i, j] -> [i mod 32, j mod 32]; U[i, j, k] -> [i mod 32, k mod 32] }")
    bad = Mapping(block=block, thread=by_k)
    races = find_races(writes, reads, bad)
    assert (WRITE_WRITE, ("U", "U")) in _kinds(races)
    assert "(with N = " in races[0].example


def test_running_out_of_the_operation_quota_cannot_prove_anything():
    sp = _matmul()
    schedule = _map_tiles(sp, 32)
    with pytest.raises(UnprovenRaceError, match="cannot prove the mapping race-free: isl operation quota"):
        check_schedule(sp.model, schedule, max_operations=10)
    check_schedule(sp.model, schedule)  # the context works again afterwards


def test_a_barrier_before_the_reader_works_as_one_after_the_writer():
    ctx = isl.Context()
    writes, reads = _tile_accesses(ctx)
    schedule = isl.Schedule.read_from_str(ctx, _tile(reader="barrier.before"))
    assert find_races(writes, reads, mapping_of(schedule), shared={"A"}) == []


def test_trees_the_checker_does_not_analyse_are_refused_not_passed():
    ctx = isl.Context()
    in_a_set = """{ domain: "{ W[i] : 0 <= i < 4; R[i] : 0 <= i < 4 }", child: { set: [
      { filter: "{ W[i] }", child: { mark: "barrier", child: { schedule: "[{ W[i] -> [(i)] }]" } } },
      { filter: "{ R[i] }" } ] } }"""
    with pytest.raises(UnprovenRaceError, match="set node"):
        mapping_of(isl.Schedule.read_from_str(ctx, in_a_set))
    not_a_band = """{ domain: "{ W[i] : 0 <= i < 4 }", child: { mark: "threads", child: { filter: "{ W[i] }" } } }"""
    with pytest.raises(UnprovenRaceError, match="other than a band"):
        mapping_of(isl.Schedule.read_from_str(ctx, not_a_band))


def test_a_reduction_tree_with_one_barrier_removed_is_a_missing_barrier_between_its_levels():
    """The CUDA recipe's tree over the threads of a block (schedules/cuda_reduce.py) is proven
    race-free with its barrier marks; deleting the one after tree level 1 makes level 2's
    reads of level 1 a missing barrier, and nothing else."""
    from akg.compiler import pipeline_for
    from akg.schedules.cuda import race_role
    from akg.schedules.cuda_reduce import map_trees

    b = GraphBuilder("g")
    b.output(b.sum(b.input("x", (3, 1000)), axes=[1]))
    pipeline = pipeline_for(b.build(), "cuda-emu")
    done = map_trees(pipeline.model, pipeline.schedule, pipeline.bands, {0: 16}, pipeline.target.spec,
                     lambda node, k: node)
    check_schedule(done.model, done.schedule, roles=race_role, shared=done.shared, private=done.private)

    level1 = next(tid for t, tid in done.model.tensor_ids.items() if t.name.endswith(".rshared1"))
    writer = next(s.name for s in done.model.statements if s.write.relation.get_tuple_name(isl.dim_type.out) == level1)

    def drop(node):
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == "barrier":
            names = []
            node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
            if names == [writer]:
                return node.delete()
        for k in range(node.n_children()):
            node = drop(node.child(k)).parent()
        return node

    bad = drop(done.schedule.get_root()).get_schedule()
    with pytest.raises(RaceError) as err:
        check_schedule(done.model, bad, roles=race_role, shared=done.shared, private=done.private)
    (race,) = err.value.races
    assert race.kind == MISSING_BARRIER and race.tensor.endswith(f"({level1})") and writer in race.statements[0]

"""Knob space and Config: JSON round trip, legal samples, ScheduleError on bad configs."""

import random

import pytest

import akg
from akg.compiler import Pipeline
from akg.errors import ScheduleError
from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph
from akg.schedules.cpu import BandConfig, bands_of, cpu_config
from akg.schedules.space import Config
from akg.target import get_target


def _pipeline():
    b = GraphBuilder("mm")
    b.output(b.relu(b.matmul(b.input("a", (24, 40)), b.input("w", (40, 36)))))
    return b.build(), Pipeline(lower_graph(b.build()), get_target("cpu"))


def test_config_json_round_trip_and_hashable():
    c = cpu_config(fusion="max", bands=(BandConfig((1, 0), (8, 0), (0, 16), True),), unroll=False)
    again = Config.from_json(c.to_json())
    assert again == c and hash(again) == hash(c)
    with pytest.raises(ScheduleError, match="not a config"):
        Config.from_json('{"speed": 11}')


def test_space_is_derived_from_the_schedule_and_samples_are_legal(check_kernel):
    graph, p = _pipeline()
    space = p.space()
    assert len(space.bands) == len(p.bands) and space.size() > 1000
    assert all(0 in sizes for b in space.bands for sizes in b.tiles)
    rng = random.Random(0)
    for _ in range(4):
        config = space.sample(rng)
        space.validate(config)
        check_kernel(graph, p.build(config))


def test_space_enumerates_lazily():
    _, p = _pipeline()
    first = [c for _, c in zip(range(5), p.space())]
    assert len(set(first)) == 5


@pytest.mark.parametrize("band, message", [
    (BandConfig((0, 1), (64, 0), (0, 0)), "tile 64 of loop 0 is larger than its extent 24"),
    (BandConfig((0, 1), (8, 0), (16, 0)), "register tile 16 of loop 0 exceeds its tile 8"),
    (BandConfig((0, 0), (0, 0), (0, 0)), "not a permutation"),
    (BandConfig((0, 1), (0,), (0,)), "needs 2 tile and register sizes"),
])
def test_bad_configs_raise_schedule_error(band, message):
    graph, p = _pipeline()
    with pytest.raises(ScheduleError, match=message):
        akg.build(graph, config=cpu_config(bands=(band,)))


def test_wrong_band_count_and_illegal_order():
    graph, p = _pipeline()
    with pytest.raises(ScheduleError, match="config maps 2 bands, the schedule has 1"):
        akg.build(graph, config=cpu_config(bands=(BandConfig((0, 1), (0, 0), (0, 0)),) * 2))
    b = GraphBuilder("scan")  # a band whose loops cannot be interchanged
    b.output(b.sum(b.input("x", (8, 32)), axes=[1]))
    q = Pipeline(lower_graph(b.build()), get_target("cpu"))
    assert all(i.members == 1 for i in q.bands)


def test_default_config_is_legal_and_vectorises_matmul():
    graph, p = _pipeline()
    config = p.default_config()
    p.space().validate(config)
    (band,) = bands_of(config)
    assert band.sink and band.register[-1] >= get_target("cpu").vector_lanes("float32")
    assert "T.vectorized" in p.build(config).tir()


def test_reduction_blocks_are_knobs_of_reduction_bands(check_kernel):
    # the matmul's 40-deep reduction: blocks of 8 or 16 (two blocks or more), or none; sampled,
    # mutated and read back from JSON like every other knob, and every blocked sample correct
    graph, p = _pipeline()
    space = p.space()
    (bs,) = space.bands
    assert bs.blocks == (0, 8, 16) and len(bs.prefetches) > 1
    rng = random.Random(1)
    blocked = [c for c in (space.sample(rng) for _ in range(40)) if bands_of(c)[0].block]
    assert blocked
    for config in blocked[:3]:
        assert Config.from_json(config.to_json()) == config
        space.validate(config)
        check_kernel(graph, p.build(config))
    assert any(bands_of(space.mutate(blocked[0], random.Random(s)))[0].block != bands_of(blocked[0])[0].block
               for s in range(60))
    b = GraphBuilder("rows")  # no reduction below the band: nothing to block
    b.output(b.relu(b.input("x", (8, 32))))
    assert Pipeline(lower_graph(b.build()), get_target("cpu")).space().bands[0].blocks == (0,)
    with pytest.raises(ScheduleError, match="reduction block"):
        akg.build(graph, config=Config("smart", (("block", 0, None, -4),)))


def test_recompute_is_a_knob_of_bands_with_producers(check_kernel):
    # a depthwise conv reads a padded copy of its input (the producer, band 0): recomputing it
    # per cache tile is sampled, mutated and read back from JSON; the copy's own band and a
    # matmul (no producer) have no such knob
    b = GraphBuilder("dw")
    x = b.input("x", (1, 8, 12, 12))
    b.output(b.conv2d(x, b.input("w", (8, 1, 3, 3)), strides=[1, 1], padding=[1, 1], groups=8))
    graph = b.build()
    p = Pipeline(lower_graph(graph), get_target("cpu"))
    pad, conv = p.space().bands
    assert pad.recomputes == (False,) and conv.recomputes == (False, True)
    assert _pipeline()[1].space().bands[0].recomputes == (False,)
    rng = random.Random(0)
    space = p.space()
    samples = [space.sample(rng) for _ in range(30)]
    on = [c for c in samples if bands_of(c)[1].recompute]
    assert on and len(on) < len(samples)
    for config in on[:3]:
        assert Config.from_json(config.to_json()) == config
        space.validate(config)
        check_kernel(graph, p.build(config))
    assert any(bands_of(space.mutate(on[0], random.Random(s)))[1].recompute is False for s in range(80))

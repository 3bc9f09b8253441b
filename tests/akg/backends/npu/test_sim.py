import dataclasses
import json
import math

import numpy as np
import pytest

from akg.backends.npu.errors import NpuRaceError, NpuSyncError
from akg.backends.npu.isa import (BLOCK, Bcast, Buffer, Dma, Loop, Mmad, Pipe, PipeBarrier, Program, Scalar, Scope,
                                  SetFlag, Stride, Vector, WaitFlag, var)
from akg.backends.npu.layout import ND, NZ, ZN, ZZ, from_fractal, layout_dmas, to_fractal
from akg.backends.npu.sim import simulate
from akg.backends.npu.spec import MIB, get_spec
from akg.errors import InputDataError
from npu_programs import add_program, drop, matmul_program, staged

SPEC = get_spec()
ONE_CORE = dataclasses.replace(SPEC, cores=1)
RNG = np.random.default_rng(1)
V, M, S, MTE1, MTE2, MTE3 = Pipe.V, Pipe.M, Pipe.S, Pipe.MTE1, Pipe.MTE2, Pipe.MTE3


def ub(name, n, dtype="float16", offset=0):
    return Buffer(Scope.UB, name, (n,), dtype, offset=offset)


def run_staged(inputs, outputs, body, data, extra=()):
    """Run UB work on `data` (arrays by UB buffer name); outputs by UB buffer name, and the
    trace entry of the first instruction of `body`."""
    program = staged("case", {b.name: b for b in inputs}, {b.name: b for b in outputs}, body, extra)
    r = simulate(program, SPEC, {f"g_{k}": v for k, v in data.items()}, trace=True)
    first = len(inputs) + 2
    return {b.name: r.outputs[f"g_{b.name}"] for b in outputs}, r.report.trace[first]


def lanes(start, repeat, mask, block, stride):
    """Reference lane -> element map of a vector operand (per element, for the tests)."""
    return np.array([[start + r * stride.repeat + (l // block) * stride.block + l % block for l in range(mask)]
                     for r in range(repeat)])


# --- vector instructions ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("op, fn", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                                    ("div", np.divide), ("max", np.maximum), ("min", np.minimum)])
def test_binary_vector_ops_match_numpy_bit_for_bit(op, fn, dtype):
    n = 3 * 256 // np.dtype(dtype).itemsize
    a, b, c = ub("a", n, dtype), ub("b", n, dtype, 2048), ub("c", n, dtype, 4096)
    x = RNG.standard_normal(n).astype(dtype)
    y = (RNG.standard_normal(n) + 3).astype(dtype)
    out, entry = run_staged([a, b], [c], [Vector(op, c[0], (a[0], b[0]), repeat=3)], {"a": x, "b": y})
    assert np.array_equal(out["c"], fn(x, y))
    assert entry.cycles == SPEC.vector_issue + 3 and entry.pipe == "V"
    out, _ = run_staged([a], [c], [Vector(op, c[0], (a[0], 0.75), repeat=3)], {"a": x})
    assert np.array_equal(out["c"], fn(x, np.asarray(0.75, dtype)))


@pytest.mark.parametrize("op, fn", [("abs", np.abs), ("exp", np.exp), ("ln", np.log), ("sqrt", np.sqrt),
                                    ("rsqrt", lambda x: np.reciprocal(np.sqrt(x))), ("rec", np.reciprocal),
                                    ("relu", lambda x: np.maximum(x, 0))])
def test_unary_vector_ops_compute_in_the_operand_dtype(op, fn):
    a, c = ub("a", 256), ub("c", 256, offset=512)
    x = RNG.standard_normal(256).astype(np.float16)
    if op in ("ln", "sqrt", "rsqrt"):
        x = np.abs(x) + np.float16(0.1)
    out, entry = run_staged([a], [c], [Vector(op, c[0], (a[0],), repeat=2)], {"a": x})
    assert out["c"].dtype == np.float16 and np.array_equal(out["c"], fn(x))
    assert entry.cycles == 12


def test_masks_and_strides_address_lanes_as_blocks_and_repeats():
    n = 4096
    a, c = ub("a", n), ub("c", n, offset=2 * n)
    x = RNG.standard_normal(n).astype(np.float16)
    init = RNG.standard_normal(n).astype(np.float16)
    src, dst = Stride(32, 384), Stride(48, 640)  # blocks two and three blocks apart
    body = [Vector("mul", c[16], (a[32], 2.0), repeat=5, mask=100, dst_stride=dst, src_strides=(src,))]
    out, entry = run_staged([a, c], [c], body, {"a": x, "c": init})
    expect = init.copy()
    expect[lanes(16, 5, 100, 16, dst)] = x[lanes(32, 5, 100, 16, src)] * np.float16(2)
    assert np.array_equal(out["c"], expect) and entry.cycles == 15


def test_casts_convert_like_numpy_with_64_lanes_per_repeat():
    h, f, i = ub("h", 128), ub("f", 128, "float32", 256), ub("i", 128, "int32", 1024)
    x = (RNG.standard_normal(128) * 100).astype(np.float16)
    body = [Vector("cast", f[0], (h[0],), repeat=2), Vector("cast", i[0], (f[0],), repeat=2)]
    out, entry = run_staged([h], [f, i], body, {"h": x})
    assert np.array_equal(out["f"], x.astype(np.float32))
    assert np.array_equal(out["i"], x.astype(np.float32).astype(np.int32))  # truncation toward zero
    assert entry.cycles == 12
    back = ub("back", 128, offset=2048)
    out, _ = run_staged([f], [back], [Vector("cast", back[0], (f[0],), repeat=2)],
                        {"f": np.float32([1 / 3, 65504.0, 1e-8, -2.5] * 32)})
    assert np.array_equal(out["back"], np.float32([1 / 3, 65504.0, 1e-8, -2.5] * 32).astype(np.float16))


def test_dup_and_broadcast_sources():
    s, c, d = ub("s", 16), ub("c", 1024, offset=32), ub("d", 1024, offset=4096)
    x = RNG.standard_normal(16).astype(np.float16)
    rows = RNG.standard_normal(1024).astype(np.float16)
    body = [
        Vector("dup", c[0], (1.5,), repeat=8),
        # eight rows of 128 at once: each 32-byte block (16 lanes) is one row's segment here
        Vector("sub", d[0], (d[0], Bcast(s[0], block=1, repeat=8)), repeat=2),
        Vector("dup", c[512], (Bcast(s[3]),), repeat=1, mask=64),
    ]
    out, _ = run_staged([s, d], [c, d], body, {"s": x, "d": rows})
    assert np.all(out["c"][:512] == 1.5) and np.all(out["c"][512:576] == x[3])
    scalar = np.repeat(np.concatenate([x[:8], x[8:16]]), 16)  # repeat r, block b: s[8r + b]
    assert np.array_equal(out["d"][:256], rows[:256] - scalar)
    assert np.array_equal(out["d"][256:], rows[256:])


@pytest.mark.parametrize("op, fn", [("cmp_eq", np.equal), ("cmp_ne", np.not_equal), ("cmp_lt", np.less),
                                    ("cmp_le", np.less_equal), ("cmp_gt", np.greater), ("cmp_ge", np.greater_equal)])
def test_compare_writes_a_one_zero_condition_and_select_picks_per_lane(op, fn):
    """vcmp + vsel: float32 sources (64 lanes a repeat) compared into a float16 condition,
    NaN comparing false (except ne); sel takes each lane from one source only, so the NaN and
    inf of the branch not chosen never reach the result. Each costs issue + repeat."""
    n = 192
    a, b = ub("a", n, "float32"), ub("b", n, "float32", 1024)
    cond, out = ub("cond", n, "float16", 2048), ub("out", n, "float32", 2560)
    x = RNG.standard_normal(n).astype(np.float32)
    y = RNG.standard_normal(n).astype(np.float32)
    y[::7] = x[::7]
    x[5], y[9], x[11] = np.nan, np.inf, -np.inf
    body = [Vector(op, cond[0], (a[0], b[0]), repeat=3), Vector("sel", out[0], (cond[0], a[0], b[0]), repeat=3)]
    res, entry = run_staged([a, b], [cond, out], body, {"a": x, "b": y})
    assert np.array_equal(res["cond"], fn(x, y).astype(np.float16))
    assert np.array_equal(res["out"], np.where(fn(x, y), x, y), equal_nan=True)
    assert entry.cycles == SPEC.vector_issue + 3 and entry.pipe == "V"
    # a number and a broadcast source; the condition read at its own dtype's strides
    s = ub("s", 16, "float32", 3584)
    body = [Vector(op, cond[0], (a[0], 0.25), repeat=3),
            Vector("sel", out[0], (cond[0], Bcast(s[0]), -1.0), repeat=3, mask=50)]
    init = RNG.standard_normal(n).astype(np.float32)
    res, _ = run_staged([a, s, out], [cond, out], body, {"a": x, "s": np.full(16, 7.0, np.float32), "out": init})
    assert np.array_equal(res["cond"], fn(x, np.float32(0.25)).astype(np.float16))
    expect = init.copy()
    for r in range(3):
        lanes_ = slice(64 * r, 64 * r + 50)
        expect[lanes_] = np.where(fn(x[lanes_], np.float32(0.25)), 7.0, -1.0)
    assert np.array_equal(res["out"], expect)


def test_select_on_int32_and_a_nan_condition_lane_counts_as_true():
    c, a, o = ub("c", 64, "float32"), ub("a", 64, "int32", 256), ub("o", 64, "int32", 512)
    cv = np.float32([0, 1, np.nan, -0.0] * 16)
    av = np.arange(64, dtype=np.int32)
    res, _ = run_staged([c, a], [o], [Vector("sel", o[0], (c[0], a[0], -5))], {"c": cv, "a": av})
    assert np.array_equal(res["o"], np.where(cv != 0, av, -5))


def test_a_select_reading_its_condition_before_the_compare_is_synchronised_is_a_race():
    g = Buffer(Scope.GM, "g", (128,), "float16")
    cond, x, o = ub("cond", 128), ub("x", 128, offset=256), ub("o", 128, offset=512)
    body = (Vector("dup", x[0], (1.0,)), Dma(g[0], cond[0], (128,)), Vector("sel", o[0], (cond[0], x[0], 0.0)))
    with pytest.raises(NpuRaceError, match=r"race in UB: V reads bytes 0..255 at instruction 2 `v.sel o\[0\], "
                                           r"cond\[0\], x\[0\], 0.0 repeat=1`.*MTE2 writes"):
        simulate(Program("race", (g,), (cond, x, o), body), SPEC)
    flags = (Vector("dup", x[0], (1.0,)), Dma(g[0], cond[0], (128,)), SetFlag(MTE2, V), WaitFlag(MTE2, V),
             Vector("sel", o[0], (cond[0], x[0], 0.0)))
    simulate(Program("ok", (g,), (cond, x, o), flags), SPEC)


def test_reductions_within_repeats_blocks_and_across_repeats():
    a = ub("a", 512)
    r1, r2, r3 = ub("r1", 32, offset=1024), ub("r2", 64, offset=1088), ub("r3", 128, offset=1216)
    x = RNG.standard_normal(512).astype(np.float16)
    body = [
        Vector("reduce_sum", r1[0], (a[0],), repeat=4),
        Vector("reduce_max", r1[16], (a[0],), repeat=4, mask=100),
        Vector("reduce_min_block", r2[0], (a[0],), repeat=4, mask=120),
        Vector("reduce_max_across", r3[0], (a[0],), repeat=4, mask=70),
    ]
    out, entry = run_staged([a, r1, r2, r3], [r1, r2, r3], body,
                            {"a": x, "r1": np.zeros(32, np.float16), "r2": np.zeros(64, np.float16),
                             "r3": np.zeros(128, np.float16)})
    rows = x.reshape(4, 128)
    assert np.array_equal(out["r1"][:4], rows.astype(np.float32).sum(1).astype(np.float16))
    assert np.array_equal(out["r1"][16:20], rows[:, :100].max(1))
    blocks = np.full((4, 128), np.inf, np.float16)
    blocks[:, :120] = rows[:, :120]
    mins = blocks.reshape(4, 8, 16).min(2)
    assert np.array_equal(out["r2"][:32].reshape(4, 8), mins)
    assert np.array_equal(out["r3"][:70], rows[:, :70].max(0)) and np.all(out["r3"][70:] == 0)
    assert entry.cycles == 14


def test_scalar_ops_work_on_single_ub_elements():
    a = ub("a", 16)
    x = np.arange(16, dtype=np.float16)
    body = [SetFlag(V, S), WaitFlag(V, S),
            Scalar("add", a[0], (a[1], a[2])), Scalar("mul", a[3], (a[3], 2.5)), Scalar("sqrt", a[4], (a[9],)),
            Scalar("mov", a[5], (7.0,)), Scalar("nop", ops=5), SetFlag(S, V), WaitFlag(S, V)]
    out, _ = run_staged([a], [a], body, {"a": x})
    assert list(out["a"][:6]) == [3.0, 1.0, 2.0, 7.5, 3.0, 7.0]
    program = staged("s", {"a": a}, {"a": a}, body)
    trace = simulate(program, SPEC, [x], trace=True).report.trace
    assert [e.cycles for e in trace if e.text.startswith("s.")] == [1, 1, 1, 1, 5]


# --- DMAs and the cube --------------------------------------------------------------------------


def test_dma_copies_strided_regions_and_converts_out_of_l0c():
    g = Buffer(Scope.GM, "g", (64, 64), "float16")
    out = Buffer(Scope.GM, "out", (4, 8, 32), "float16")
    u = ub("u", 1024)
    body = [Dma(g[3, 5], u[0], (4, 8, 16), (512, 64, 2), (256, 32, 1)), SetFlag(MTE2, MTE3), WaitFlag(MTE2, MTE3),
            Dma(u[0], out[0], (1024,))]
    x = RNG.standard_normal((64, 64)).astype(np.float16)
    r = simulate(Program("copy", (g, out), (u,), tuple(body)), SPEC, [x, None], trace=True)
    flat = x.reshape(-1)
    idx = 3 * 64 + 5 + np.arange(4)[:, None, None] * 512 + np.arange(8)[None, :, None] * 64 + \
        np.arange(16)[None, None, :] * 2
    assert np.array_equal(r.outputs["out"][:, :, :16], flat[idx])
    assert np.isnan(r.outputs["out"][:, :, 16:]).all()  # never written: local memory starts as NaN
    assert r.report.trace[0].cycles == 20 + math.ceil(512 * 2 / 64)


@pytest.mark.parametrize("path", ["GM->L1", "GM->UB", "GM->L0A", "GM->L0B", "L1->L0A", "L1->L0B", "L1->UB",
                                  "L0C->UB", "UB->GM"])
def test_dma_cost_is_latency_plus_bytes_over_the_path_rate(path):
    src, dst = path.split("->")
    dtype = "float32" if src == "L0C" else "float16"
    a = Buffer(src, "a", (3000,), dtype)
    b = Buffer(dst, "b", (3000,), dtype)
    params = tuple(x for x in (a, b) if x.scope is Scope.GM)
    local = tuple(x for x in (a, b) if x.scope is not Scope.GM)
    r = simulate(Program("d", params, local, (Dma(a[0], b[0], (3000,)),)), SPEC, functional=False, trace=True)
    nbytes = 3000 * (4 if dtype == "float32" else 2)
    assert r.report.trace[0].cycles == 20 + math.ceil(nbytes / SPEC.rate(path))
    assert r.report.path_bytes[path] == nbytes and r.report.trace[0].pipe == Dma(a[0], b[0], (1,)).pipe.value


@pytest.mark.parametrize("m, k, n, c_dtype", [(32, 48, 64, "float32"), (20, 40, 24, "float32"),
                                              (64, 32, 16, "float16")])
def test_mmad_multiplies_fractals_and_costs_one_cycle_per_fractal_triple(m, k, n, c_dtype):
    a = RNG.standard_normal((m, k)).astype(np.float16)
    b = RNG.standard_normal((k, n)).astype(np.float16)
    init = RNG.standard_normal((m, n)).astype(c_dtype)
    fa, fb, fc = to_fractal(a, ZZ), to_fractal(b, NZ), to_fractal(init, ZN)
    ga, gb = Buffer(Scope.GM, "ga", (fa.size,), "float16"), Buffer(Scope.GM, "gb", (fb.size,), "float16")
    gc, gc2 = Buffer(Scope.GM, "gc", (fc.size,), c_dtype), Buffer(Scope.GM, "gc2", (fc.size,), c_dtype)
    a0, b0 = Buffer(Scope.L0A, "a0", (fa.size,), "float16"), Buffer(Scope.L0B, "b0", (fb.size,), "float16")
    c0 = Buffer(Scope.L0C, "c0", (fc.size,), c_dtype)
    uc = Buffer(Scope.UB, "uc", (fc.size,), c_dtype)
    m1, k1, n1 = fa.shape[0], fa.shape[1], fb.shape[1]
    body = (
        Dma(ga[0], a0[0], (fa.size,)), Dma(gb[0], b0[0], (fb.size,)), SetFlag(MTE2, M), WaitFlag(MTE2, M),
        Mmad(c0[0], a0[0], b0[0], m, k, n),
        SetFlag(M, V), WaitFlag(M, V), Dma(c0[0], uc[0], (fc.size,)), SetFlag(V, MTE3), WaitFlag(V, MTE3),
        Dma(uc[0], gc[0], (fc.size,)), SetFlag(MTE3, V), WaitFlag(MTE3, V), SetFlag(V, M), WaitFlag(V, M),
        Mmad(c0[0], a0[0], b0[0], m, k, n, accumulate=True),
        SetFlag(M, V), WaitFlag(M, V), Dma(c0[0], uc[0], (fc.size,)), SetFlag(V, MTE3), WaitFlag(V, MTE3),
        Dma(uc[0], gc2[0], (fc.size,)),
    )
    r = simulate(Program("mm", (ga, gb, gc, gc2), (a0, b0, c0, uc), body), SPEC,
                 [fa.reshape(-1), fb.reshape(-1), None, None], trace=True)
    expect = a.astype(np.float32) @ b.astype(np.float32)
    got = from_fractal(r.outputs["gc"], ZN, (m, n))
    tol = dict(rtol=1e-6, atol=1e-5) if c_dtype == "float32" else dict(rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(got, expect.astype(c_dtype), **tol)
    twice = from_fractal(r.outputs["gc2"], ZN, (m, n))
    np.testing.assert_allclose(twice, (2 * expect).astype(c_dtype), **tol)
    mmads = [e for e in r.report.trace if e.text.startswith("mmad")]
    assert [e.cycles for e in mmads] == [10 + m1 * k1 * n1] * 2 and mmads[0].pipe == "M"
    assert r.report.cube_flops == 2 * 2 * m * k * n


def test_hand_written_tiled_matmul_matches_numpy():
    a = RNG.standard_normal((128, 256)).astype(np.float16)
    b = RNG.standard_normal((256, 64)).astype(np.float16)
    expect = a.astype(np.float32) @ b.astype(np.float32)
    r32 = simulate(matmul_program(128, 64, 256, 64, 32, 32, 64, out_dtype="float32"), SPEC, [a, b, None])
    np.testing.assert_allclose(r32.outputs["c"], expect, rtol=1e-5, atol=1e-4)
    r16 = simulate(matmul_program(128, 64, 256, 64, 32, 32, 64), SPEC, [a, b, None])
    assert r16.outputs["c"].dtype == np.float16
    np.testing.assert_allclose(r16.outputs["c"], expect, rtol=5e-3, atol=5e-3)
    assert r16.report.blocks == 4 and r16.report.waves[0].blocks == 4


def test_large_matmul_tiles_approach_the_cube_roofline():
    # one core: a 256 x 256 output tile reads 64 B of A and B per cube cycle, what GM gives it
    big = simulate(matmul_program(256, 256, 4096, 256, 256, 64, 128), ONE_CORE, functional=False).report
    assert big.roofline.limit == "cube" and big.fraction > 0.85 and big.pipe_busy["M"] > 0.85 * big.cycles
    # 64 x 64 tiles (16 blocks queued on the core) read each operand four times as often
    small = simulate(matmul_program(256, 256, 4096, 64, 64, 32, 64), ONE_CORE, functional=False).report
    assert small.roofline.limit == "gm" and small.cycles > 4 * big.cycles * 0.9


# --- synchronisation and races ------------------------------------------------------------------


def test_double_buffering_overlaps_dma_and_vector_work():
    db = simulate(add_program(1 << 17, 4096), ONE_CORE, functional=False, trace=True).report
    sb = simulate(add_program(1 << 17, 4096, double_buffer=False), ONE_CORE, functional=False, trace=True).report
    assert db.overlap("MTE2", "V") > 0.5 * db.pipe_busy["V"]
    assert db.cycles < sum(db.pipe_busy.values())
    assert db.cycles < sb.cycles
    assert db.overlap("MTE2", "V") > sb.overlap("MTE2", "V")
    assert db.busy_intervals("MTE2")[0][0] >= 1 and db.utilization("MTE2") > 0.95


def test_the_hand_written_programs_are_race_free_and_correct():
    x = RNG.standard_normal(1 << 15).astype(np.float16)
    y = RNG.standard_normal(1 << 15).astype(np.float16)
    for program in (add_program(1 << 15, 2048, blocks=4), add_program(1 << 15, 2048, double_buffer=False)):
        assert np.array_equal(simulate(program, SPEC, [x, y, None]).outputs["z"], x + y)


def test_a_missing_wait_is_a_race_naming_both_instructions():
    program = drop(add_program(1 << 14, 2048), lambda i: i == WaitFlag(MTE2, V, var("j")))
    with pytest.raises(NpuRaceError, match=r"race in UB: V reads bytes 0..4095 at instruction 11 `v.add .*` "
                                           r"\(block=0, i=0, j=0\), and MTE2 writes bytes 0..4095 at instruction "
                                           r"7 `dma.MTE2 x_ub\[j\*2048\] .*` \(block=0, i=0, j=0\)"):
        simulate(program, SPEC, functional=False)


def test_write_after_read_and_write_after_write_are_races():
    war = drop(add_program(1 << 14, 2048), lambda i: isinstance(i, (SetFlag, WaitFlag)) and i.src is V
               and i.dst is MTE2)
    with pytest.raises(NpuRaceError, match=r"MTE2 writes bytes 0..4095 .*i=1, j=0\), and V reads"):
        simulate(war, SPEC, functional=False)
    g = Buffer(Scope.GM, "g", (256,), "float16")
    u = ub("u", 256)
    waw = Program("waw", (g,), (u,), (Vector("dup", u[0], (0.0,), repeat=2), Dma(g[0], u[128], (128,))))
    with pytest.raises(NpuRaceError, match="MTE2 writes bytes 256..511.*V writes bytes 0..511"):
        simulate(waw, SPEC)


def test_races_are_found_on_the_exact_bytes_of_strided_regions():
    g = Buffer(Scope.GM, "g", (1024,), "float16")
    u = ub("u", 1024)
    even_blocks = Vector("dup", u[0], (1.0,), repeat=4, dst_stride=Stride(32, 256))  # blocks 0, 2, 4, ...
    odd_blocks = Dma(g[0], u[16], (32, 16), (16, 1), (32, 1))  # blocks 1, 3, 5, ...
    simulate(Program("ok", (g,), (u,), (even_blocks, odd_blocks)), SPEC)
    clash = Dma(g[0], u[32], (31, 16), (16, 1), (32, 1))  # blocks 2, 4, ...
    with pytest.raises(NpuRaceError):
        simulate(Program("clash", (g,), (u,), (even_blocks, clash)), SPEC)


def test_barriers_order_the_pipes_they_name():
    g = Buffer(Scope.GM, "g", (256,), "float16")
    u, w = ub("u", 256), ub("w", 256, offset=512)
    load, use = Dma(g[0], u[0], (256,)), Vector("relu", w[0], (u[0],), repeat=2)
    for barrier in (PipeBarrier(MTE2), PipeBarrier()):
        r = simulate(Program("b", (g,), (u, w), (load, barrier, use)), SPEC, trace=True).report
        assert r.trace[2].start >= r.trace[0].end
    with pytest.raises(NpuRaceError):
        simulate(Program("b", (g,), (u, w), (load, PipeBarrier(MTE3), use)), SPEC)


def test_flags_order_pipes_and_misuse_is_reported():
    g = Buffer(Scope.GM, "g", (256,), "float16")
    u, w = ub("u", 256), ub("w", 256, offset=512)
    load, use = Dma(g[0], u[0], (256,)), Vector("relu", w[0], (u[0],), repeat=2)
    r = simulate(Program("f", (g,), (u, w), (load, SetFlag(MTE2, V), WaitFlag(MTE2, V), use)), SPEC,
                 trace=True).report
    assert r.trace[3].start == r.trace[0].end  # set right after the copy, wait released, relu starts
    with pytest.raises(NpuSyncError, match="instruction 1 `wait_flag MTE2 -> V #0`.*wait forever"):
        simulate(Program("f", (g,), (u, w), (load, WaitFlag(MTE2, V), SetFlag(MTE2, V), use)), SPEC)
    with pytest.raises(NpuSyncError, match=r"ends with flags still set: MTE2 -> V #3 \(x1\)"):
        simulate(Program("f", (g,), (u, w), (load, SetFlag(MTE2, V, 3))), SPEC, races=False)


def test_blocks_touching_the_same_gm_bytes_race():
    g, out = Buffer(Scope.GM, "g", (4096,), "float16"), Buffer(Scope.GM, "out", (4096,), "float16")
    u = ub("u", 1024)
    body = lambda at: (Dma(g[BLOCK * 1024], u[0], (1024,)), SetFlag(MTE2, MTE3), WaitFlag(MTE2, MTE3),
                       Dma(u[0], out[at], (1024,)))
    simulate(Program("ok", (g, out), (u,), body(BLOCK * 1024), blocks=4), SPEC, functional=False)
    with pytest.raises(NpuRaceError, match=r"race in GM:out byte 512: block 0 writes .* and block 1 writes"):
        simulate(Program("bad", (g, out), (u,), body(BLOCK * 256), blocks=4), SPEC, functional=False)
    reads_other = (Dma(out[(1 - BLOCK) * 1024], u[0], (1024,)), SetFlag(MTE2, MTE3), WaitFlag(MTE2, MTE3),
                   Dma(u[0], out[BLOCK * 1024], (1024,)))
    with pytest.raises(NpuRaceError, match="block 1 writes it .* block 0 reads it"):
        simulate(Program("bad", (g, out), (u,), reads_other, blocks=2), SPEC, functional=False)


# --- timing model and report ----------------------------------------------------------------------


def test_blocks_beyond_the_cores_queue_and_share_the_gm_cap():
    one = simulate(add_program(1 << 16, 4096, blocks=1), SPEC, functional=False).report
    many = simulate(add_program(80 << 16, 4096, blocks=80), SPEC, functional=False).report
    assert [(w.count, w.blocks) for w in many.waves] == [(2, 32), (1, 16)]
    full, last = many.waves[0].cycles, many.waves[1].cycles
    assert full > one.cycles and last < full  # 32 cores share 1200 B/cycle: 37.5 each, 16 get 64
    assert many.cycles == 2 * full + last
    per_block = many.gm_bytes / 80
    assert 0.9 * SPEC.gm_bytes_per_cycle < 32 * per_block / full <= SPEC.gm_bytes_per_cycle


def test_mte2_and_mte3_of_one_core_share_its_part_of_the_gm_cap():
    narrow = dataclasses.replace(ONE_CORE, gm_bandwidth=64e9)  # 64 B/cycle for reads and writes together
    r = simulate(add_program(1 << 17, 4096), narrow, functional=False).report
    assert r.cycles >= r.gm_bytes / 64
    wide = simulate(add_program(1 << 17, 4096), ONE_CORE, functional=False).report
    assert wide.cycles < 0.75 * r.cycles


def test_extrapolated_loops_time_exactly_like_full_simulation():
    for program in (add_program(1 << 18, 4096), add_program(1 << 17, 2048, double_buffer=False),
                    matmul_program(256, 256, 2048, 128, 128, 64, 128)):
        fast = simulate(program, SPEC, functional=False, races=False).report
        full = simulate(program, SPEC, functional=False, races=False, trace=True).report
        assert (fast.cycles, fast.pipe_busy) == (full.cycles, full.pipe_busy)


def test_the_report_says_npu_sim_and_counts_work():
    program = add_program(1 << 16, 4096, blocks=2)
    x = np.ones(1 << 16, np.float16)
    r = simulate(program, SPEC, [x, x, None]).report
    assert r.label == "npu-sim" and r.spec == SPEC.key() and r.trace is None
    assert r.seconds == r.cycles / SPEC.clock_hz
    assert r.path_bytes["GM->UB"] == 2 * 2 ** 17 and r.path_bytes["UB->GM"] == 2 ** 17 and r.gm_bytes == 3 * 2 ** 17
    assert r.vector_repeats == 2 ** 16 // 128 and r.cube_flops == 0
    assert r.instructions == 2 * (8 + 8 * 12)
    assert r.high_water["UB"] == 6 * 8192 and r.capacity["UB"] == SPEC.ub_usable_bytes
    assert r.roofline.limit == "gm" and r.roofline.gm == 3 * 2 ** 17 / 1200
    assert 0 < r.fraction < 1
    text = r.summary()
    assert text.startswith("npu-sim: kernel 'add_float16_65536_db'") and "gm-bound" in text
    assert json.loads(json.dumps(r.to_dict()))["cycles"] == r.cycles
    assert simulate(program, SPEC, functional=False).report.cycles == r.cycles
    with pytest.raises(ValueError, match="no trace"):
        r.busy_intervals("V")


def test_arguments_are_checked_and_copied():
    program = add_program(1 << 12, 1024)
    x = np.arange(1 << 12, dtype=np.float16)
    out = simulate(program, SPEC, {"x": x, "y": x}).outputs
    assert np.array_equal(out["z"], x + x) and out["x"] is not x
    with pytest.raises(InputDataError, match="has 4096 elements"):
        simulate(program, SPEC, [x[:10]])
    with pytest.raises(InputDataError, match="no parameter"):
        simulate(program, SPEC, {"w": x})
    assert np.array_equal(simulate(program, SPEC).outputs["z"], np.zeros(1 << 12, np.float16))


def test_layout_dmas_feed_the_cube_from_nd_matrices():
    a = RNG.standard_normal((32, 64)).astype(np.float16)
    b = RNG.standard_normal((64, 48)).astype(np.float16)
    ga, gb, gc = (Buffer(Scope.GM, n, s, d) for n, s, d in (("a", (32, 64), "float16"), ("b", (64, 48), "float16"),
                                                               ("c", (32, 48), "float32")))
    a1, b1 = Buffer(Scope.L1, "a1", (2048,), "float16"), Buffer(Scope.L1, "b1", (3072,), "float16", offset=4096)
    a0, b0 = Buffer(Scope.L0A, "a0", (2048,), "float16"), Buffer(Scope.L0B, "b0", (3072,), "float16")
    c0, cu = Buffer(Scope.L0C, "c0", (1536,), "float32"), Buffer(Scope.UB, "cu", (32, 48), "float32")
    body = (*layout_dmas(ga[0], a1[0], 32, 64, ND, ZN), *layout_dmas(gb[0], b1[0], 64, 48, ND, ZN),
            SetFlag(MTE2, MTE1), WaitFlag(MTE2, MTE1),
            *layout_dmas(a1[0], a0[0], 32, 64, ZN, ZZ), *layout_dmas(b1[0], b0[0], 64, 48, ZN, NZ),
            SetFlag(MTE1, M), WaitFlag(MTE1, M), Mmad(c0[0], a0[0], b0[0], 32, 64, 48), SetFlag(M, V), WaitFlag(M, V),
            *layout_dmas(c0[0], cu[0], 32, 48, ZN, ND), SetFlag(V, MTE3), WaitFlag(V, MTE3),
            Dma(cu[0], gc[0], (32 * 48,)))
    r = simulate(Program("nd", (ga, gb, gc), (a1, b1, a0, b0, c0, cu), body), SPEC, [a, b, None])
    np.testing.assert_allclose(r.outputs["c"], a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_race_records_are_forgotten_only_once_every_pipe_is_ordered_after_them():
    g = Buffer(Scope.GM, "g", (2048,), "float16")
    u = ub("u", 2048)
    i = var("i")
    fill = Loop("i", 100, (Vector("dup", u[i * 16], (1.0,), mask=16),))  # 100 records of 32 bytes
    read_first = Dma(u[0], g[0], (16,))
    with pytest.raises(NpuRaceError, match="MTE3 reads bytes 0..31"):
        simulate(Program("late", (g,), (u,), (fill, read_first)), SPEC, functional=False)
    simulate(Program("ok", (g,), (u,), (fill, SetFlag(V, MTE3), WaitFlag(V, MTE3), read_first)), SPEC)


def test_a_full_queue_stalls_dispatch():
    g = Buffer(Scope.GM, "g", (256,), "float16")
    u, w = ub("u", 256), ub("w", 256, offset=512)
    body = tuple(Vector("relu", w[0], (w[0],), repeat=2) for _ in range(40)) + (Dma(g[0], u[0], (256,)),)
    trace = simulate(Program("q", (g,), (u, w), body), SPEC, functional=False, trace=True).report.trace
    assert SPEC.queue_depth == 16
    assert trace[40].start == trace[40 - 1 - 16].start + 2  # dispatched once relu 23 left the queue
    assert [e.start for e in trace[:3]] == [1, 13, 25]


# --- the L2 -----------------------------------------------------------------------------------------


def tile_reads(shared: bool, blocks: int = 32, n: int = 16384) -> Program:
    """Each block copies an n-element fp16 tile GM -> UB (the same tile for all blocks, or its
    own) and writes 16 elements back."""
    x = Buffer(Scope.GM, "x", (blocks * n,), "float16")
    out = Buffer(Scope.GM, "out", (blocks * 16,), "float16")
    u = ub("u", n)
    body = (Dma(x[0 if shared else BLOCK * n], u[0], (n,)), SetFlag(MTE2, MTE3), WaitFlag(MTE2, MTE3),
            Dma(u[0], out[BLOCK * 16], (16,)))
    return Program("shared" if shared else "distinct", (x, out), (u,), body, blocks=blocks)


def test_blocks_reading_the_same_gm_tile_hit_the_l2():
    same = simulate(tile_reads(True), SPEC, functional=False).report
    apart = simulate(tile_reads(False), SPEC, functional=False).report
    assert same.gm_bytes == apart.gm_bytes == 32 * (32768 + 32)
    # distinct tiles: 32 cores share 1200 B/cycle of HBM (37.5 each); one shared tile: HBM gives
    # it once, the L2 serves the rest, each core moves at its path's 64 B/cycle
    assert apart.cycles >= 32768 / 37.5 and same.cycles < 20 + 2 + 32768 / 64 + 60 < apart.cycles
    assert same.l2_hit_bytes["GM->UB"] == 31 * 32768 and same.hbm_bytes == 32768 + 32 * 32
    assert apart.l2_hits == 0 and apart.hbm_bytes == apart.gm_bytes
    assert "L2: 1015808 GM bytes hit" in same.summary()
    # without an L2 both cost the same
    none = dataclasses.replace(SPEC, l2_bytes=0)
    assert simulate(tile_reads(True), none, functional=False).report.cycles == \
        simulate(tile_reads(False), none, functional=False).report.cycles == apart.cycles


def test_wave_unique_bytes_of_a_grid_matmul():
    from akg.backends.npu.sim_compile import _Compiler
    from akg.backends.npu.sim_l2 import _l2_waves

    # 1024^3 in 128 x 128 tiles: an 8 x 8 grid, two waves of 32 blocks = 4 grid rows each
    program = matmul_program(1024, 1024, 1024, 128, 128, 64, 128)
    code = _Compiler(program, SPEC)
    a_op, b_op, c_op = code.gm_ops
    assert (a_op.path, b_op.path, c_op.write) == ("GM->L1", "GM->L1", True)
    # per K chunk the wave reads 4 distinct A tiles (one per grid row) and 8 distinct B tiles
    # of 32 blocks' reads; the second wave reads the B tiles the first left in the L2
    (n0, size0, first), (n1, size1, second) = _l2_waves(code, SPEC)
    assert (n0, size0, n1, size1) == (1, 32, 1, 32)
    assert first.hbm == {a_op.op.index: 4 / 32, b_op.op.index: 8 / 32}
    assert second.hbm == {a_op.op.index: 4 / 32, b_op.op.index: 0.0}
    # brute force: the bytes of one instance (chunk 0) over the first wave's blocks
    for g, unique in ((a_op, 4), (b_op, 8)):
        seen = set()
        for block in range(32):
            env = {**program.block_env(block), "co": 0, "cj": 0}
            lo = g.acc.start(env)
            for s in g.acc.starts(lo):
                seen.update(range(s, s + g.acc.run))
        assert len(seen) == unique * g.nbytes
    r = simulate(program, SPEC, functional=False).report
    reads = r.path_bytes["GM->L1"]
    assert r.hbm_bytes == 3 * 1024 * 1024 * 2  # A and B read from HBM once, C written once
    assert r.l2_hit_bytes["GM->L1"] == reads - 2 * 1024 * 1024 * 2
    assert r.roofline.gm == pytest.approx(max(r.hbm_bytes / 1200, r.gm_bytes / (32 * 128)))
    old = simulate(program, dataclasses.replace(SPEC, l2_bytes=0), functional=False).report
    assert old.hbm_bytes == old.gm_bytes and old.cycles > 1.4 * r.cycles


def test_an_l2_smaller_than_the_footprint_keeps_proportionally_less():
    from akg.backends.npu.sim_compile import _Compiler
    from akg.backends.npu.sim_l2 import _l2_waves

    program = matmul_program(1024, 1024, 1024, 128, 128, 64, 128)
    small = dataclasses.replace(SPEC, l2_bytes=2 * MIB)  # a wave's footprint: 1 + 2 + 1 MiB (A, B, C)
    code = _Compiler(program, small)
    _, b_op, _ = code.gm_ops
    first, second = (l2 for _, _, l2 in _l2_waves(code, small))
    assert first.hbm[b_op.op.index] == 8 / 32  # one chunk's tiles fit: the wave still shares them
    assert second.hbm[b_op.op.index] == pytest.approx(8 / 32 * (1 - 2 / 4), abs=1e-4)  # half still resident
    r = simulate(program, small, functional=False).report
    full = simulate(program, SPEC, functional=False).report
    assert r.hbm_bytes == full.hbm_bytes + 1024 * 1024 * 2 // 2 and r.cycles >= full.cycles


def test_timelines_shared_between_waves_time_like_their_own():
    from akg.backends.npu.sim_compile import _Compiler
    from akg.backends.npu.sim_l2 import _l2_waves
    from akg.backends.npu.sim_timing import _time_block

    for program in (matmul_program(1024, 1024, 1024, 128, 128, 64, 128),
                    matmul_program(512, 4608, 4608, 256, 128, 64, 128)):
        code = _Compiler(program, SPEC)
        own = sum(n * _time_block(code, SPEC, 0, size, False, l2.hbm).cycles for n, size, l2 in _l2_waves(code, SPEC))
        assert simulate(program, SPEC, functional=False, races=False).report.cycles == own

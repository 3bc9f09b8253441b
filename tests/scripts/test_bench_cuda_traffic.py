"""The traffic model of the CUDA benchmark (scripts/bench/cuda_traffic.py): a warp's global
accesses in 32-byte sectors, lane by lane through a div/mod of its threads, its shared
accesses in bank wavefronts, and an unrolled loop's reuse of a register tile's operand."""

import pytest


@pytest.fixture(scope="module")
def traffic(bench_module):
    return bench_module("cuda_traffic")


def test_sectors_of_a_warps_lanes(traffic):
    assert traffic._sectors(1, 32, 4) == 4  # coalesced floats
    assert traffic._sectors(0, 32, 4) == 1  # a broadcast
    assert traffic._sectors(8, 32, 4) == 32  # 32 bytes apart: a sector per lane
    assert traffic._sectors(None, 32, 2) == 32  # not affine in the lane
    assert traffic._sectors(1, 32, 2) == 2


def test_a_warps_sectors_through_a_div_mod_of_its_threads(traffic):
    """A block tile copied by the flattened thread id (a row of 64 per 4 rows of 16 threads):
    not affine along x, but lane by lane the first warp reads 32 consecutive floats."""
    from tvm import tirx

    tx, ty, q = tirx.Var("tx", "int32"), tirx.Var("ty", "int32"), tirx.Var("q", "int32")
    f = q * 256 + ty * 16 + tx
    flat = tirx.floordiv(f, 64) * 4096 + tirx.floormod(f, 64)
    threads = {"threadIdx.x": (tx, 16), "threadIdx.y": (ty, 16)}
    assert traffic._lane_step(None, flat, tx) is None
    assert traffic._warp_sectors(flat, threads, 4) == 4 and traffic._warp_sectors(flat, threads, 2) == 2
    column = tirx.floormod(f, 64) * 4096 + tirx.floordiv(f, 64)  # the transposed copy: a sector per lane
    assert traffic._warp_sectors(column, threads, 4) == 32
    assert traffic._warp_sectors(tirx.floormod(f * q, 64), threads, 4) is None  # not a constant per lane


def test_shared_wavefronts_count_bank_conflicts_and_unrolled_reuse(traffic):
    from tvm import tirx

    tx, ty = tirx.Var("tx", "int32"), tirx.Var("ty", "int32")
    threads = {"threadIdx.x": (tx, 16), "threadIdx.y": (ty, 16)}
    assert traffic._bank_wavefronts(ty * 16 + tx, threads, 4) == 1  # 32 consecutive floats
    assert traffic._bank_wavefronts(ty * 16, threads, 4) == 1  # two broadcast words, banks 0 and 16
    assert traffic._bank_wavefronts(tx * 32, threads, 4) == 16  # a column of 32-float rows: one bank
    assert traffic._bank_wavefronts(tx * 33, threads, 4) == 1  # ... padded by one
    assert traffic._bank_wavefronts(ty * 16 + tx, threads, 2) == 1  # halves: two lanes per word
    # an operand in a register tile: loaded once per unrolled output it does not depend on
    i, j, k = (tirx.Var(n, "int32") for n in "ijk")
    loops = ((k, 16, False), (i, 8, True), (j, 8, True))
    assert traffic._iterations(k * 128 + j * 16 + tx, loops) == 16 * 8  # B: per k and column j
    assert traffic._iterations(i * 256 + k, loops) == 16 * 8  # A: per k and row i
    assert traffic._iterations(i * 256 + k, ((k, 16, False), (i, 8, False), (j, 8, False))) == 16 * 8
    assert traffic._iterations(k * 128 + j, ((k, 16, False), (i, 8, False), (j, 8, False))) == 16 * 64  # not unrolled

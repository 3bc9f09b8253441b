import dataclasses

import pytest

from akg.backends.npu.check import check_program, high_water
from akg.backends.npu.errors import NpuAlignmentError, NpuBoundsError, NpuCapacityError, NpuPathError, NpuProgramError
from akg.backends.npu.isa import (Buffer, Dma, Loop, Mmad, Pipe, Program, Scalar, Scope, SetFlag, Stride, Vector,
                                  WaitFlag, var)
from akg.backends.npu.sim import simulate
from akg.backends.npu.spec import KIB, get_spec
from akg.errors import ScheduleError
from npu_programs import add_program, matmul_program

SPEC = get_spec()
G = Buffer(Scope.GM, "g", (1 << 16,), "float16")
U = Buffer(Scope.UB, "u", (4096,), "float16")


def _check(body, buffers=(U,), blocks=1, spec=SPEC):
    return check_program(Program("k", (G,), tuple(buffers), tuple(body), blocks=blocks), spec)


def test_hand_written_programs_pass_and_report_high_water():
    assert check_program(add_program(1 << 16, 4096), SPEC)["UB"] == 6 * 4096 * 2
    marks = check_program(matmul_program(256, 256, 512, 128, 128, 64, 128), SPEC)
    assert marks == {"L1": 128 * KIB, "L0A": 32 * KIB, "L0B": 32 * KIB, "L0C": 64 * KIB, "UB": 32 * KIB}
    assert high_water(add_program(1 << 16, 4096, double_buffer=False))["UB"] == 3 * 4096 * 2


def test_a_tiling_too_big_for_a_buffer_is_rejected_before_simulation():
    program = add_program(4 * 24576, 24576)  # 6 x 48 KiB of UB: more than 248 KiB
    with pytest.raises(NpuCapacityError, match=r"UB needs 294912 bytes but spec 'ascend910-like' has 253952"):
        check_program(program, SPEC)
    # simulate checks first: these arguments have the wrong size and would fail if it ran
    with pytest.raises(NpuCapacityError, match="z_ub"):
        simulate(program, SPEC, [[1.0], [2.0], None])
    assert issubclass(NpuCapacityError, ScheduleError)  # the tuner counts it as an illegal config
    assert check_program(program, dataclasses.replace(SPEC, ub_bytes=512 * KIB, ub_usable_bytes=400 * KIB))


def test_misaligned_buffers_and_operands_are_rejected():
    with pytest.raises(NpuAlignmentError, match="not aligned to 32 bytes"):
        _check([], [Buffer(Scope.UB, "odd", (16,), "float16", offset=16)])
    with pytest.raises(NpuAlignmentError, match="UB address of u\\[8\\]"):
        _check([Vector("relu", U[0], (U[8],))])
    with pytest.raises(NpuAlignmentError, match="UB address of u\\[i\\*8\\]"):
        _check([Loop("i", 4, (Vector("relu", U[var("i") * 8], (U[0],)),))])
    with pytest.raises(NpuAlignmentError, match="whole 32-byte blocks"):
        _check([Vector("relu", U[0], (U[0],), src_strides=(Stride(8, 128),))])
    with pytest.raises(NpuAlignmentError, match="UB address of u\\[3\\]"):
        _check([Dma(G[0], U[3], (16,))])
    with pytest.raises(NpuAlignmentError, match="stride 40 of u\\[0\\]"):
        _check([Dma(G[0], U[0], (4, 16), (16, 1), (40, 1))])
    a = Buffer(Scope.L0A, "a", (1024,), "float16")
    b = Buffer(Scope.L0B, "b", (1024,), "float16")
    c = Buffer(Scope.L0C, "c", (1024,), "float32")
    with pytest.raises(NpuAlignmentError, match="aligned to a fractal \\(512 bytes\\)"):
        _check([Mmad(c[0], a[128], b[0], 16, 16, 16)], [a, b, c])
    assert _check([Mmad(c[0], a[256], b[0], 16, 16, 16), Dma(G[0], U[16], (16,))], [a, b, c, U])


def test_regions_outside_their_buffers_are_rejected_for_every_loop_value():
    i = var("i")
    with pytest.raises(NpuBoundsError, match=r"instruction 1 `dma.MTE2 u\[i\*1024\] <- g\[i\*1024\].*"
                                              r"touches elements 0..5119 of 'u', which has 4096"):
        _check([Loop("i", 5, (Dma(G[i * 1024], U[i * 1024], (1024,)),))])
    with pytest.raises(NpuBoundsError, match="touches elements 4096..69631 of 'g', which has 65536"):
        _check([Dma(G[var("block") * 4096 + 4096], U[0], (4096,))], blocks=16)
    with pytest.raises(NpuBoundsError, match="touches elements 0..4223"):
        _check([Vector("relu", U[0], (U[0],), repeat=33)])
    with pytest.raises(NpuBoundsError, match="touches elements 4080..4097"):
        _check([Vector("reduce_sum", U[4080], (U[0],), repeat=18)])
    with pytest.raises(NpuBoundsError, match="touches elements 4096..4096"):
        _check([Scalar("add", U[4096], (U[0], 1.0))])


def test_paths_repeats_masks_and_flag_ids_follow_the_spec():
    a = Buffer(Scope.L0A, "a", (1024,), "float16")
    no_direct = dataclasses.replace(SPEC, paths=tuple(p for p in SPEC.paths if p[0] != "GM->L0A"))
    with pytest.raises(NpuPathError, match="has no DMA path GM->L0A"):
        _check([Dma(G[0], a[0], (256,))], [a], spec=no_direct)
    big = Buffer(Scope.UB, "u", (1 << 15,), "float16")
    with pytest.raises(NpuProgramError, match="repeat 256 exceeds 255"):
        _check([Vector("dup", big[0], (0.0,), repeat=256)], [big])
    with pytest.raises(NpuProgramError, match="mask 129 exceeds the 128 lanes"):
        _check([Vector("dup", U[0], (0.0,), mask=129)])
    with pytest.raises(NpuProgramError, match="flag id 0..8 outside 0..7"):
        _check([Loop("i", 9, (SetFlag(Pipe.V, Pipe.MTE3, var("i")), WaitFlag(Pipe.V, Pipe.MTE3, var("i"))))])
    f32 = dataclasses.replace(SPEC, cube_out_dtypes=("float32",))
    c16 = Buffer(Scope.L0C, "c", (256,), "float16")
    b = Buffer(Scope.L0B, "b", (256,), "float16")
    with pytest.raises(NpuProgramError, match="multiplies float16 into float32"):
        _check([Mmad(c16[0], a[0], b[0], 16, 16, 16)], [a, b, c16], spec=f32)


def test_the_condition_of_a_select_is_checked_like_any_lane_operand():
    cond = Buffer(Scope.UB, "cond", (128,), "float32", offset=8192)
    with pytest.raises(NpuAlignmentError, match="UB address of cond\\[4\\]"):
        _check([Vector("sel", U[0], (cond[4], U[256], 0.0))], [U, cond])
    with pytest.raises(NpuBoundsError, match="of 'cond'"):  # 64 float32 lanes a repeat: 192 > 128
        _check([Vector("sel", U[0], (cond[0], U[256], 0.0), repeat=3)], [U, cond])
    with pytest.raises(NpuProgramError, match="mask 65 exceeds the 64 lanes"):
        _check([Vector("cmp_lt", U[0], (cond[0], 1.0), mask=65)], [U, cond])
    assert _check([Vector("sel", U[0], (cond[0], U[256], 0.0), repeat=2)], [U, cond])

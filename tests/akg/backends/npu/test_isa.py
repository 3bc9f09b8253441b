import pytest

from akg.backends.npu.errors import NpuPathError, NpuProgramError
from akg.backends.npu.isa import (BLOCK, Affine, Bcast, Buffer, Dma, Loop, Mmad, Pipe, PipeBarrier, Program, Ref,
                                  Scalar, Scope, SetFlag, Stride, Vector, WaitFlag, block_axis, var)
from akg.backends.npu.spec import PATH_PIPES

i, j = var("i"), var("j")
GM_X = Buffer(Scope.GM, "x", (64, 128), "float16")
UB_A = Buffer(Scope.UB, "a", (4096,), "float16")
UB_B = Buffer(Scope.UB, "b", (4096,), "float16", offset=8192)
BUFFERS = {s: Buffer(s, f"buf_{s.value.lower()}", (4096,), "float16") for s in Scope}


def test_affine_arithmetic_printing_and_bounds():
    e = 3 * i + j * 16 - 2 + i
    assert e == Affine(-2, (("i", 4), ("j", 16)))
    assert str(e) == "i*4 + j*16 - 2" and str(Affine()) == "0" and str(BLOCK * 8 + 1) == "block*8 + 1"
    assert e.eval({"i": 2, "j": 1}) == 22
    assert e.bounds({"i": 3, "j": 2}) == (-2, 22)
    assert (-i).bounds({"i": 4}) == (-3, 0)
    assert (i - i) == Affine() and (i * 0) == Affine()
    with pytest.raises(NpuProgramError, match="not affine"):
        i * j
    with pytest.raises(NpuProgramError, match="integer"):
        Affine.of(1.5)


def test_buffers_index_row_major_and_validate():
    assert GM_X[2, 3].offset == Affine(2 * 128 + 3)
    assert GM_X[i, 16].offset == 128 * i + 16
    assert GM_X[i * 4].offset == 4 * i and str(GM_X[i, 0]) == "x[i*128]"
    assert (UB_B.nbytes, UB_B.end, UB_B.itemsize) == (8192, 16384, 2)
    assert Buffer("UB", "t", (2, 3), "float32").declaration() == "t: UB float32[2x3] @0x0"
    with pytest.raises(NpuProgramError, match="not an NPU dtype"):
        Buffer(Scope.UB, "t", (4,), "float64")
    with pytest.raises(NpuProgramError, match="GM buffers start at 0"):
        Buffer(Scope.GM, "t", (4,), "float16", offset=32)
    with pytest.raises(NpuProgramError, match="positive"):
        Buffer(Scope.UB, "t", (0,), "float16")
    with pytest.raises(NpuProgramError, match="2 dims"):
        GM_X[1, 2, 3]


@pytest.mark.parametrize("path", sorted(PATH_PIPES))
def test_dma_pipe_follows_from_its_path(path):
    src, dst = path.split("->")
    dt = "float32" if src == "L0C" else "float16"
    s = Buffer(src, "s", (4096,), dt)
    d = Buffer(dst, "d", (4096,), dt)
    dma = Dma(s[0], d[0], (16, 16))
    assert dma.pipe == Pipe(PATH_PIPES[path]) and dma.path == path
    assert dma.src_strides == dma.dst_strides == (16, 1) and dma.nbytes == 256 * (4 if dt == "float32" else 2)


@pytest.mark.parametrize("src, dst", [("UB", "L1"), ("L0C", "GM"), ("GM", "L0C"), ("L1", "GM"), ("UB", "UB"),
                                      ("GM", "GM"), ("L0A", "L0B"), ("UB", "L0A")])
def test_illegal_dma_paths_are_rejected(src, dst):
    with pytest.raises(NpuPathError, match=f"illegal DMA path {src}->{dst}"):
        Dma(BUFFERS[Scope(src)][0], Buffer(dst, "other", (4096,), "float16")[0], (16,))


def test_dma_shapes_strides_and_conversion():
    with pytest.raises(NpuProgramError, match="1 to 3"):
        Dma(GM_X[0], UB_A[0], (2, 2, 2, 2))
    with pytest.raises(NpuProgramError, match="do not match"):
        Dma(GM_X[0], UB_A[0], (4, 4), src_strides=(1,))
    with pytest.raises(NpuProgramError, match="only L0C->UB converts"):
        Dma(GM_X[0], Buffer(Scope.UB, "f", (64,), "float32")[0], (64,))
    c = Buffer(Scope.L0C, "c", (256,), "float32")
    assert Dma(c[0], UB_A[0], (256,)).pipe is Pipe.V
    with pytest.raises(NpuProgramError, match="only L0C->UB converts"):
        Dma(UB_A[0], Buffer(Scope.GM, "g", (256,), "float32")[0], (256,))


def test_vector_instructions_validate_their_operands():
    ok = Vector("add", UB_A[0], (UB_A[0], UB_B[0]), repeat=4)
    assert ok.pipe is Pipe.V and ok.kind == "binary" and ok.src_strides == (None, None)
    assert Vector("add", UB_A[0], (UB_A[0], 1.5)).srcs[1] == 1.5
    assert Vector("dup", UB_A[0], (Bcast(UB_B[3]),)).kind == "dup"
    f32 = Buffer(Scope.UB, "f", (1024,), "float32", offset=16384)
    i32 = Buffer(Scope.UB, "n", (1024,), "int32", offset=20480)
    assert Vector("cast", f32[0], (UB_A[0],)).itemsize == 4
    bad = [
        (dict(op="erf", dst=UB_A[0], srcs=(UB_A[0],)), "unknown vector op"),
        (dict(op="add", dst=UB_A[0], srcs=(UB_A[0],)), "takes 2 source"),
        (dict(op="add", dst=UB_A[0], srcs=(1.0, 2.0)), "two numbers"),
        (dict(op="exp", dst=UB_A[0], srcs=(2.0,)), "takes a buffer source"),
        (dict(op="add", dst=UB_A[0], srcs=(UB_A[0], f32[0])), "mixes dtypes"),
        (dict(op="sqrt", dst=i32[0], srcs=(i32[0],)), "needs float"),
        (dict(op="cast", dst=UB_A[0], srcs=(UB_B[0],)), "no cast from float16 to float16"),
        (dict(op="dup", dst=UB_A[0], srcs=(UB_B[0],)), "number or a Bcast"),
        (dict(op="reduce_sum", dst=UB_A[0], srcs=(Bcast(UB_B[0]),)), "reduces a Ref"),
        (dict(op="add", dst=GM_X[0], srcs=(UB_A[0], UB_B[0])), "not UB"),
        (dict(op="add", dst=UB_A[0], srcs=(UB_A[0], UB_B[0]), repeat=0), "at least 1"),
        (dict(op="add", dst=UB_A[0], srcs=(UB_A[0], UB_B[0]), mask=0), "at least 1 lane"),
        (dict(op="add", dst=UB_A[0], srcs=(UB_A[0], 1.0), src_strides=(None, Stride(16, 128))), "no strides"),
    ]
    for kwargs, message in bad:
        with pytest.raises(NpuProgramError, match=message):
            Vector(**kwargs)


def test_compare_and_select_validate_their_operands():
    a, b = ub_buf("a", "float32"), ub_buf("b", "float32", 512)
    h, i = ub_buf("h", "float16", 1024), ub_buf("i", "int32", 2048)
    cmp = Vector("cmp_ge", h[0], (a[0], 0.5), repeat=2)
    assert cmp.kind == "cmp" and cmp.itemsize == 4 and cmp.number_dtype == "float32"
    assert str(cmp) == "v.cmp_ge h[0], a[0], 0.5 repeat=2"
    sel = Vector("sel", a[0], (h[0], b[0], Bcast(a[0])), mask=7)
    assert sel.kind == "select" and str(sel) == "v.sel a[0], h[0], b[0], bcast(a[0],0,0) repeat=1 mask=7"
    Vector("sel", i[0], (a[0], 1, 2))  # int32 values, a float32 condition
    for bad, match in [
        (lambda: Vector("cmp_lt", h[0], (a[0], i[0])), "compares mixed dtypes"),
        (lambda: Vector("cmp_lt", h[0], (1.0, 2.0)), "of two numbers"),
        (lambda: Vector("cmp_lt", h[0], (a[0],)), "takes 2 source"),
        (lambda: Vector("sel", a[0], (1.0, a[0], b[0])), "condition from a Ref"),
        (lambda: Vector("sel", a[0], (h[0], i[0], b[0])), "sel mixes dtypes"),
        (lambda: Vector("sel", a[0], (h[0], a[0])), "takes 3 source"),
    ]:
        with pytest.raises(NpuProgramError, match=match):
            bad()


def ub_buf(name, dtype, offset=0):
    return Buffer(Scope.UB, name, (256,), dtype, offset=offset)


def test_mmad_scalar_flags_and_barriers_validate():
    a = Buffer(Scope.L0A, "a", (256,), "float16")
    b = Buffer(Scope.L0B, "b", (256,), "float16")
    c = Buffer(Scope.L0C, "c", (256,), "float32")
    mm = Mmad(c[0], a[0], b[0], 20, 16, 33)
    assert mm.pipe is Pipe.M and mm.fractals() == (2, 1, 3)
    assert str(Mmad(c[0], a[0], b[0], 16, 16, 16, accumulate=i)) == \
        "mmad c[0], a[0], b[0] m=16 k=16 n=16 accumulate_if=(i)"
    with pytest.raises(NpuProgramError, match="not L0A"):
        Mmad(c[0], b[0], b[0], 16, 16, 16)
    with pytest.raises(NpuProgramError, match="float16 fractals"):
        Mmad(c[0], Buffer(Scope.L0A, "af", (256,), "float32")[0], b[0], 16, 16, 16)
    assert Scalar("nop", ops=3).pipe is Pipe.S and str(Scalar("add", UB_A[0], (UB_A[1], 2.0))) == \
        "s.add a[0], a[1], 2.0"
    with pytest.raises(NpuProgramError, match="takes a destination"):
        Scalar("add", UB_A[0], (UB_A[1],))
    with pytest.raises(NpuProgramError, match="two different pipes"):
        SetFlag(Pipe.V, Pipe.V)
    with pytest.raises(NpuProgramError, match="two different pipes"):
        WaitFlag(Pipe.ALL, Pipe.V)
    assert SetFlag("MTE2", "V", 1).pipe is Pipe.MTE2 and WaitFlag("MTE2", "V", j).pipe is Pipe.V
    assert PipeBarrier(Pipe.MTE3).barrier is Pipe.MTE3 and str(PipeBarrier()) == "pipe_barrier ALL"
    with pytest.raises(NpuProgramError, match="other than 'block'"):
        Loop("block2", 4, ())
    with pytest.raises(NpuProgramError, match="at least 1"):
        Loop("i", 0, ())


def _program(body, blocks=1, **kw):
    return Program("k", (GM_X,), (UB_A, UB_B), tuple(body), blocks=blocks, **kw)


def test_programs_check_names_variables_and_buffers():
    with pytest.raises(NpuProgramError, match="undefined loop variable"):
        _program([Dma(GM_X[i, 0], UB_A[0], (128,))])
    with pytest.raises(NpuProgramError, match="reuses the loop variable 'i'"):
        _program([Loop("i", 2, (Loop("i", 2, ()),))])
    with pytest.raises(NpuProgramError, match="does not declare"):
        _program([Dma(GM_X[0], Buffer(Scope.UB, "ghost", (16,), "float16")[0], (16,))])
    with pytest.raises(NpuProgramError, match="used twice: a"):
        Program("k", (GM_X,), (UB_A, UB_A), ())
    with pytest.raises(NpuProgramError, match="not GM"):
        Program("k", (UB_A,), (), ())
    with pytest.raises(NpuProgramError, match="make it a parameter"):
        Program("k", (), (GM_X,), ())
    with pytest.raises(NpuProgramError, match="undefined loop variable.*block1"):
        _program([Dma(GM_X[block_axis(1), 0], UB_A[0], (128,))], grid=(4,))
    p = _program([Dma(GM_X[block_axis(0) * 2 + block_axis(1), 0], UB_A[0], (128,))], grid=(4, 8))
    assert p.blocks == 32 and p.block_env(13) == {"block": 13, "block0": 1, "block1": 5}
    with pytest.raises(NpuProgramError, match="does not give"):
        _program([], blocks=5, grid=(2, 2))


def test_listing_prints_one_instruction_per_line_with_loops_indented():
    body = [
        SetFlag(Pipe.V, Pipe.MTE2, 0),
        Loop("i", 4, (
            WaitFlag(Pipe.V, Pipe.MTE2, 0),
            Dma(GM_X[BLOCK * 16 + i * 4, 0], UB_A[0], (4, 128), (128, 1), (128, 1)),
            SetFlag(Pipe.MTE2, Pipe.V, 0),
            WaitFlag(Pipe.MTE2, Pipe.V, 0),
            Vector("mul", UB_B[0], (UB_A[0], 0.5), repeat=4, mask=64, dst_stride=Stride(16, 128)),
            SetFlag(Pipe.V, Pipe.MTE2, 0),
        )),
        WaitFlag(Pipe.V, Pipe.MTE2, 0),
        PipeBarrier(),
    ]
    p = _program(body, blocks=4)
    assert p.instruction_count == 10
    assert p.listing() == """\
.kernel k blocks=4
.param  x: GM float16[64x128]
.buffer a: UB float16[4096] @0x0
.buffer b: UB float16[4096] @0x2000
  set_flag V -> MTE2 #0
  for i in 0..4:
    wait_flag V -> MTE2 #0
    dma.MTE2 a[0] <- x[block*2048 + i*512] shape=(4, 128)
    set_flag MTE2 -> V #0
    wait_flag MTE2 -> V #0
    v.mul b[0](16,128), a[0], 0.5 repeat=4 mask=64
    set_flag V -> MTE2 #0
  wait_flag V -> MTE2 #0
  pipe_barrier ALL
"""
    assert p.listing(numbered=True).splitlines()[5] == "    1    for i in 0..4:"
    assert str(p) == p.listing()
    assert [idx for idx, _, _, _ in p.walk()] == list(range(10))
    assert p.buffer("a") is UB_A and Ref(UB_A, 3).dtype == "float16"

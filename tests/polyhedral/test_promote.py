"""polyhedral/promote.py: the local buffer layouts of promotions (blocked panels, permuted
accumulators); the promotion decisions themselves are exercised through every kernel test."""

from tvm import tirx

from akg.polyhedral.promote import local_index


def test_identity_layouts_leave_the_index_alone():
    assert local_index([1, 2, 3], 0) == [1, 2, 3]
    assert local_index([1, 2, 3], ()) == [1, 2, 3]


def test_a_blocked_layout_moves_the_last_dim_first_and_keeps_its_remainder_last():
    assert local_index([4, 64], 16) == [4, 4, 16]  # sizes: 64 columns as 4 blocks of 16
    i = tirx.Var("i", "int32")
    j = tirx.Var("j", "int32")
    first, row, last = local_index([i, j], 16)
    assert str(first) == str(tirx.floordiv(j, 16)) and row.same_as(i) and str(last) == str(tirx.floormod(j, 16))


def test_a_permutation_puts_the_vector_dim_last():
    # a conv's accumulators [b, f, y, x] vectorised over f: kept as [b, y, x, f]
    assert local_index([1, 32, 1, 7], (0, 2, 3, 1)) == [1, 1, 7, 32]
    assert local_index(["b", "f", "y", "x"], (0, 2, 3, 1)) == ["b", "y", "x", "f"]

"""akg/verify.py: how outputs are judged against the reference. Storage floats (bfloat16,
float8) are floats: judged within their tolerance, not bit for bit (`--check` compared a
bfloat16 output exactly, against the 2e-2 / 1e-2 the README states)."""

import ml_dtypes
import numpy as np

from akg.verify import Reference, check_outputs, compare


def _reference(*arrays):
    return Reference(list(arrays), [a.astype(np.float64) if a.dtype.kind != "b" else a for a in arrays])


def test_bfloat16_outputs_are_judged_within_their_tolerance():
    ref = np.array([1.0, 2.0, -3.0, 100.0], np.float32).astype(ml_dtypes.bfloat16)
    one_ulp = (ref.view(np.uint16) + 1).view(ml_dtypes.bfloat16)
    far = (ref.astype(np.float32) * 1.5).astype(ml_dtypes.bfloat16)
    (close,) = check_outputs(["y"], [one_ulp], _reference(ref))
    assert close.ok and (close.rtol, close.atol) == (2e-2, 1e-2)
    assert not check_outputs(["y"], [far], _reference(ref))[0].ok
    assert not compare(["y"], [one_ulp], _reference(ref)) and compare(["y"], [far], _reference(ref))


def test_integer_and_bool_outputs_stay_exact():
    ref = np.array([1, 2, 3], np.int32)
    assert not check_outputs(["i"], [ref + np.array([0, 0, 1], np.int32)], _reference(ref))[0].ok
    flags = np.array([True, False])
    assert check_outputs(["b"], [flags.copy()], _reference(flags))[0].ok

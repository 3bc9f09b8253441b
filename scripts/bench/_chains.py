"""NumPy side of the corpus-chain benchmarks: the reference interpreter on the kernel file
named by $AKG_BENCH_CHAIN_<k> (imports no TVM)."""

import os

_GRAPHS = {}


def _run(k, arrays):
    from akg.graph.interpreter import evaluate
    from akg.graph.io import load_model

    if k not in _GRAPHS:
        _GRAPHS[k] = load_model(os.environ[f"AKG_BENCH_CHAIN_{k}"])
    return evaluate(_GRAPHS[k], list(arrays)[: len(_GRAPHS[k].inputs)])


def chain0(arrays):
    return _run(0, arrays)


def chain1(arrays):
    return _run(1, arrays)


def chain2(arrays):
    return _run(2, arrays)

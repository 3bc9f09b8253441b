#!/usr/bin/env python
"""Random small graphs compiled and checked against the reference: each graph's default kernel
and `--configs` configs sampled from its knob space (a config the space offers must compile to
a right kernel, or be refused with a typed error). Two families: elementwise, broadcast,
reduction, layout, softmax and matmul chains (`chains`), and conv/pool/pad/concat/slice/cast
chains over small NCHW images (`images`). Every failure is a JSON line with the seed that
rebuilds it (`--seed S --count 1`); the exit code is 1 when one was found.

    python scripts/fuzz_kernels.py [--seconds 60 | --count N] [--seed 0] [--family chains|images|both]
                                   [--configs 2] [--target cpu] [--show]

Found this way and fixed (2026-12-07): a max pool fused after an average pool read the wrong
columns, and a pad after a strided conv ran before the conv (docs/architecture.md, "AST ->
TIR" and "Scheduling").
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
import traceback

import numpy as np

_SIDES = [1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33, 64, 65, 96, 129]
_UNARY = ["exp", "tanh", "sigmoid", "relu", "abs", "neg", "gelu", "erf"]
_BINARY = ["add", "sub", "mul", "maximum", "minimum", "div"]


def chains(rng: random.Random):
    """Up to six ops over one to four dims: unary and binary elementwise ops (second operand of
    the same shape, a broadcast of it or a number), sum/mean/max/min over random axes, transpose,
    flattening reshape, softmax and a matmul with a small weight."""
    from akg.graph import GraphBuilder

    b = GraphBuilder("chain")
    shape = [rng.choice(_SIDES) for _ in range(rng.randint(1, 4))]
    while np.prod(shape) > 300_000:
        k = rng.randrange(len(shape))
        shape[k] = max(1, shape[k] // 2)
    values, fresh = [b.input("x0", shape)], _inputs(b, "x")

    for _ in range(rng.randint(1, 6)):
        v = rng.choice(values)
        shp, r = list(v.shape), rng.random()
        if r < 0.25:
            v = getattr(b, rng.choice(_UNARY))(v) if rng.random() < 0.9 else b.sqrt(b.abs(v))
        elif r < 0.5:
            op, pick = rng.choice(_BINARY), rng.random()
            if pick < 0.4 and shp:
                other_shape = [s if rng.random() < 0.5 else 1 for s in shp]
                other = fresh(other_shape[rng.randint(0, len(other_shape) - 1):] if rng.random() < 0.5 else other_shape)
            elif pick < 0.7:
                other = fresh(shp)
            else:
                other = rng.choice([0.5, -1.0, 2.0, 0.0])
            if op == "div":  # away from zero
                v = b.div(v, b.add(b.abs(other), 1.0) if not isinstance(other, float) else abs(other) + 1.0)
            else:
                v = b.op(op, v, other)
        elif r < 0.7 and shp:
            axes = sorted(rng.sample(range(len(shp)), rng.randint(1, len(shp))))
            v = b.op(rng.choice(["sum", "mean", "max", "min"]), v, axes=axes, keepdims=rng.random() < 0.5)
        elif r < 0.8 and len(shp) >= 2:
            perm = list(range(len(shp)))
            rng.shuffle(perm)
            v = b.transpose(v, perm=perm)
        elif r < 0.87 and shp:
            v = b.reshape(v, shape=[int(np.prod(shp))])
        elif r < 0.94 and shp:
            v = b.softmax(v, axis=rng.randrange(len(shp)))
        elif shp:
            v = b.matmul(v, fresh((shp[-1], rng.choice([1, 3, 16, 33]))))
        values.append(v)
    extra = [rng.choice(values[1:-1])] if len(values) > 2 and rng.random() < 0.3 else []
    b.output(values[-1], *extra)
    return b.build()


def images(rng: random.Random):
    """Up to four ops over a small NCHW image: convs (strided, padded, grouped, depthwise) with
    bias and activations, max and average pools, concat, slice, pad, a float16 round trip,
    where, spatial means and a channel max added back."""
    from akg.graph import GraphBuilder

    b = GraphBuilder("image")
    n, c = rng.choice([1, 2]), rng.choice([1, 3, 4, 8, 16, 17])
    h, w = rng.choice([1, 4, 5, 7, 8, 14, 16]), rng.choice([1, 3, 4, 7, 8, 15, 16])
    values, weight = [b.input("x0", (n, c, h, w))], _inputs(b, "w")

    for _ in range(rng.randint(1, 4)):
        v = rng.choice(values)
        N, C, H, W = v.shape
        r = rng.random()
        if r < 0.3:
            kh, kw, s = rng.choice([1, 3, 5]), rng.choice([1, 3]), rng.choice([1, 2])
            pad = [rng.randint(0, kh // 2), rng.randint(0, kw // 2)] * 2
            if H + 2 * pad[0] < kh or W + 2 * pad[1] < kw:
                continue
            groups = rng.choice([1, C]) if C > 1 else 1
            out = C if groups == C else rng.choice([1, 4, 8, 16, 32])
            v = b.conv2d(v, weight((out, C // groups, kh, kw)), strides=[s, s], padding=pad, groups=groups)
            if rng.random() < 0.5:
                v = b.add(v, weight((1, out, 1, 1)))
            if rng.random() < 0.5:
                v = rng.choice([b.relu, b.relu6, b.sigmoid])(v)
        elif r < 0.45:
            k, s = rng.choice([2, 3]), rng.choice([1, 2])
            if H < k or W < k:
                continue
            pool = rng.choice([b.max_pool2d, b.avg_pool2d])
            v = pool(v, kernel=[k, k], strides=[s, s], padding=[rng.randint(0, 1)] * 4 if k == 3 else [0] * 4)
        elif r < 0.55:
            v = b.concat(v, v if rng.random() < 0.5 else b.relu(v), axis=rng.randrange(4))
        elif r < 0.65 and H > 1:
            v = b.slice(v, begin=[0, 0, 1, 0], end=[N, C, H, W])
        elif r < 0.72:
            v = b.pad(v, before=[0, 0, 1, rng.randint(0, 2)], after=[0, 0, rng.randint(0, 2), 1],
                      value=rng.choice([0.0, -1.5]))
        elif r < 0.8:
            v = b.cast(b.cast(v, to="float16"), to="float32")
        elif r < 0.88:
            v = b.where(b.op("greater", v, 0.1), v, b.mul(v, 0.01))
        elif r < 0.94:
            v = b.op("mean", v, axes=[2, 3], keepdims=True)
        else:
            v = b.add(v, b.op("max", v, axes=[1], keepdims=True))
        values.append(v)
    b.output(values[-1])
    return b.build()


FAMILIES = {"chains": chains, "images": images}


def _inputs(b, prefix: str):
    """A function declaring the graph's next input `prefix`1, `prefix`2, ... of a shape."""
    count = itertools.count(1)
    return lambda shape: b.input(f"{prefix}{next(count)}", shape)


def check(graph, seed: int, configs: int, target: str, rng: random.Random) -> list[dict]:
    """The failures of one graph: its default kernel and `configs` sampled configs against the
    reference (a typed error from a sampled config is a refusal, not a failure)."""
    from akg.compiler import pipeline_for
    from akg.errors import AkgError
    from akg.graph.interpreter import random_inputs
    from akg.verify import Reference, compare

    inputs = random_inputs(graph, seed)
    reference = Reference.of(graph, inputs)
    pipeline = pipeline_for(graph, target)
    space = pipeline.space()
    failures = []
    for config in [None, *(space.sample(rng) for _ in range(configs))]:
        label = "default" if config is None else str(config)
        try:
            kernel = pipeline.build(config)
        except AkgError as e:
            if config is None:
                failures.append({"config": label, "error": f"{type(e).__name__}: {e}"})
            continue
        bad = compare(graph, kernel(**inputs), reference)
        if bad:
            failures.append({"config": label, "mismatch": [str(m) for m in bad]})
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="stop after this long (unless --count)")
    ap.add_argument("--count", type=int, default=0, help="check this many graphs, however long it takes")
    ap.add_argument("--seed", type=int, default=0, help="the first graph's seed; graph k has seed + k")
    ap.add_argument("--family", choices=[*FAMILIES, "both"], default="both")
    ap.add_argument("--configs", type=int, default=2, help="sampled configs per graph, besides the default")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--show", action="store_true", help="print each failing graph as .mir text")
    args = ap.parse_args(argv)
    from akg.errors import AkgError

    families = list(FAMILIES) if args.family == "both" else [args.family]
    deadline = time.time() + args.seconds
    checked = failed = 0
    seed = args.seed
    while (checked < args.count) if args.count else (time.time() < deadline):
        family = families[seed % len(families)]
        rng = random.Random(seed)
        try:
            graph = FAMILIES[family](rng)
        except AkgError:  # a shape the builder refuses (typed): not a graph to check
            seed += 1
            continue
        checked += 1
        try:
            failures = check(graph, seed, args.configs, args.target, rng)
        except AkgError as e:
            failures = [{"config": "-", "error": f"{type(e).__name__}: {e}"}]
        except Exception:  # an untyped error is a bug too
            failures = [{"config": "-", "crash": traceback.format_exc(limit=4)}]
        for f in failures:
            print(json.dumps({"seed": seed, "family": family, **f}), flush=True)
        if failures:
            failed += 1
            if args.show:
                from akg.graph.io.mir import emit_mir

                print(emit_mir(graph), flush=True)
        seed += 1
    print(json.dumps({"graphs": checked, "failed": failed, "first_seed": args.seed, "next_seed": seed}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

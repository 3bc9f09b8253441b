#!/usr/bin/env python
"""Memory-bound multi-pass reductions against the stream floor, in one process.

Kernels (4096 x 1024 float32 by default): layer_norm, softmax, rms_norm and a fused layer-norm
backward (dx, dgamma, dbeta from dy, x, mean, rstd, gamma). Each is built with akg's default
config (and, with --variants, with other row-block sizes, software-prefetch distances and the
other store kind, knobs the tuner searches for these kernels) and timed with the stream floor
(`y = x * 1.5`, built by akg, over as many bytes as the kernel must move: half read, half
written; ~4096 x 1024 for the forward kernels, ~6150 x 1024 for the backward's 48 MB) in
alternating rounds (`timing.time_modules_interleaved`, best round). Where the target has
streaming stores, the floor is the faster of a copy with plain stores and one with streaming
stores. A kernel's bandwidth is the bytes it must move at least (every input read once, every
output written once) over its time; its stream fraction is that bandwidth over its floor's in
the same run.

    python scripts/bench/memory_bound.py [--rows 4096] [--cols 1024] [--rounds 9] [--variants] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import peers  # noqa: E402,F401  (sets TVM_NUM_THREADS before TVM starts its thread pool)
from timing import time_modules_interleaved  # noqa: E402

import akg  # noqa: E402
from akg.graph import GraphBuilder  # noqa: E402
from akg.graph.interpreter import random_inputs  # noqa: E402
from akg.verify import Reference, compare  # noqa: E402

EPS = 1e-5


def layer_norm(b, r, c):
    b.output(b.layer_norm(b.input("x", (r, c)), b.input("g", (c,)), b.input("bt", (c,)), epsilon=EPS))


def softmax(b, r, c):
    b.output(b.softmax(b.input("x", (r, c))))


def rms_norm(b, r, c):
    x = b.input("x", (r, c))
    ms = b.mean(b.mul(x, x), axes=[1], keepdims=True)
    b.output(b.mul(b.mul(x, b.rsqrt(b.add(ms, b.const(np.float32(EPS), name="eps")))), b.input("g", (c,))))


def layer_norm_backward(b, r, c):
    dy, x = b.input("dy", (r, c)), b.input("x", (r, c))
    mean, rstd, g = b.input("mean", (r, 1)), b.input("rstd", (r, 1)), b.input("g", (c,))
    xhat = b.mul(b.sub(x, mean), rstd)
    dyg = b.mul(dy, g)
    m1 = b.mean(dyg, axes=[1], keepdims=True)
    m2 = b.mean(b.mul(dyg, xhat), axes=[1], keepdims=True)
    dx = b.mul(rstd, b.sub(b.sub(dyg, m1), b.mul(xhat, m2)))
    b.output(dx, b.sum(b.mul(dy, xhat), axes=[0]), b.sum(dy, axes=[0]))


def stream(b, r, c):
    b.output(b.mul(b.input("x", (r, c)), b.const(np.float32(1.5), name="s")))


KERNELS = {"layer_norm": layer_norm, "softmax": softmax, "rms_norm": rms_norm,
           "layer_norm_backward": layer_norm_backward}


def graph_of(name, body, r, c):
    b = GraphBuilder(name)
    body(b, r, c)
    return b.build()


def min_bytes(graph) -> int:
    return sum(v.type.nbytes for v in (*graph.inputs, *graph.outputs))


def variants(kernel) -> dict:
    """The default config; per row-block size, the default with the register tile of its
    first band's innermost member (the rows of a row-wise reduction) set to it (0: one row at
    a time); for column reductions (sunk one-member bands), the previous default's strip of
    32 columns; per software-prefetch distance (`BandConfig.prefetch`, 0: none), the default with it."""
    from dataclasses import replace

    from akg.schedules.cpu import PREFETCH_DISTANCES, bands_of, cpu_config, switches_of
    from akg.target import STREAM

    out = {"default": kernel.config}
    bands = bands_of(kernel.config)
    if not bands:
        return out
    first = bands[0]
    for rows in (0, 2, 4, 8, 16):
        if first.register[-1] == rows or (first.tile[-1] and rows >= first.tile[-1]):
            continue
        reg = (*first.register[:-1], rows)
        new = (replace(first, register=reg), *bands[1:])
        out[f"rows={rows}"] = cpu_config(kernel.config.fusion, new, **switches_of(kernel.config))
    if any(b.sink and len(b.register) == 1 and b.register[0] > 32 for b in bands):
        # column reductions with the two-vector strip of the previous default (tile 64, strip 32)
        new = tuple(replace(b, tile=(64,), register=(32,)) if b.sink and len(b.register) == 1 else b for b in bands)
        out["columns=32"] = cpu_config(kernel.config.fusion, new, **switches_of(kernel.config))
    for distance in PREFETCH_DISTANCES:
        if distance != first.prefetch:
            new = (replace(first, prefetch=distance), *bands[1:])
            out[f"prefetch={distance}"] = cpu_config(kernel.config.fusion, new, **switches_of(kernel.config))
    if kernel.target.has(STREAM):
        label = "plain stores" if kernel.config.has("stream") else "streaming stores"
        out[label] = toggled_stream(kernel.config)
    return out


def toggled_stream(config):
    """`config` with streaming stores for its outputs the other way."""
    from akg.schedules.space import Config, Step

    if config.has("stream"):
        return config.without("stream")
    return Config(config.fusion, (*config.steps, Step("stream")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=0.2)
    ap.add_argument("--only", default="")
    ap.add_argument("--variants", action="store_true",
                    help="also other row-block sizes, prefetch distances and store kinds")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    # here, not at the top: ab_trees imports this module's graphs into older revisions of akg
    from akg.target import STREAM

    r, c = args.rows, args.cols
    names = [n for n in KERNELS if not args.only or n in args.only.split(",")]
    calls, meta, floors = {}, {}, {}
    for name in names:
        graph = graph_of(name, KERNELS[name], r, c)
        # the floor of a kernel moves as many bytes (half read, half written): the layer-norm
        # backward's 48 MB against a 32 MB copy would compare DRAM with a 32 MB L3
        rows = max(1, round(min_bytes(graph) / 2 / (c * 4)))
        floor_key = f"stream_floor ({rows} x {c})"
        if floor_key not in calls:
            # the floor is the faster of plain and streaming stores (the default and the other)
            floor_graph = graph_of("stream_floor", stream, rows, c)
            floor = akg.build(floor_graph)
            ins, outs = floor.device_arguments(**random_inputs(floor_graph, 0))
            calls[floor_key] = (floor.executable, [*ins, *outs])
            meta[floor_key] = {"bytes": min_bytes(floor_graph), "config": str(floor.config)}
            floors[floor_key] = [floor_key]
            if floor.target.has(STREAM):
                other = akg.build(floor_graph, config=toggled_stream(floor.config))
                key = f"{floor_key[:-1]}, {'plain' if floor.config.has('stream') else 'streaming'} stores)"
                calls[key] = (other.executable, [*ins, *outs])
                meta[key] = {"bytes": min_bytes(floor_graph), "config": str(other.config)}
                floors[floor_key].append(key)
                floors[key] = floors[floor_key]
        kernel = akg.build(graph)
        inputs = random_inputs(graph, 0)
        configs = variants(kernel) if args.variants else {"default": kernel.config}
        for label, config in configs.items():
            k = kernel if label == "default" else akg.build(graph, config=config)
            problems = compare(graph, k(**inputs), Reference.of(graph, inputs))
            ins, outs = k.device_arguments(**inputs)
            key = name if label == "default" else f"{name} ({label})"
            calls[key] = (k.executable, [*ins, *outs])
            meta[key] = {"bytes": min_bytes(graph), "config": str(config), "ok": not problems}
            floors[key] = floors[floor_key]
            print(f"built {key}{'' if not problems else '  MISMATCH: ' + str(problems[0])}", flush=True)
    times = time_modules_interleaved(calls, rounds=args.rounds, seconds=args.seconds)
    rows = []
    print("\n| kernel | time | min bytes | GB/s | floor (same bytes) | stream fraction | vs floor time |"
          "\n|---|---|---|---|---|---|---|")
    for key, t in times.items():
        floor_key = min(floors[key], key=times.get)
        floor_t = times[floor_key]
        bw = meta[key]["bytes"] / t
        row = {"kernel": key, "s": t, "bytes": meta[key]["bytes"], "gbps": bw / 1e9,
               "floor": floor_key, "floor_s": floor_t, "fraction": bw / (meta[floor_key]["bytes"] / floor_t),
               "config": meta[key]["config"], "ok": meta[key].get("ok", True)}
        rows.append(row)
        print(f"| {key} | {t * 1e3:.3f} ms | {row['bytes'] / 2**20:.0f} MiB | {row['gbps']:.1f} | "
              f"{floor_t * 1e3:.3f} ms | {100 * row['fraction']:.0f}% | {t / floor_t:.2f}x |")
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

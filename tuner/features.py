"""Features of a candidate kernel for the cost model, from its lowered loop nest.

Each statement of the generated code is recorded by the AST -> TIR lowering with its
enclosing loops (trip count and kind) and its accesses (tensor size, stride along the
innermost loop, local or memory buffer). Statement features are weighted by how many
instances run and summed; config knobs of the first outer band are added as they are.

Feature list (`FEATURE_NAMES`, fixed order):
  log_instances        log2 of statement instances executed
  log_ops              log2 of arithmetic operations executed
  vector_frac          share of instances inside a vector loop
  vector_width         instance-weighted mean trip count of the vector loop (0 if none)
  parallel_frac        share of instances inside a parallel loop
  log_parallel_extent  log2 of the largest parallel loop's trip count
  parallel_balance     parallel trips / cores, capped at 8
  unroll_frac          share of instances inside an unrolled loop
  log_unroll           log2 of the mean product of unrolled trip counts
  mean_depth           mean loop depth of an instance
  innermost_trips      log2 of the mean innermost trip count
  stride0_frac         share of memory accesses invariant along the innermost loop
  stride1_frac         share of memory accesses with unit stride along it
  strided_frac         share with a larger stride
  unknown_stride_frac  share with a data-dependent / non-affine stride
  local_frac           share of accesses hitting local (promoted) buffers
  log_bytes_touched    log2 of bytes of distinct tensors touched
  log_intensity        log2 of ops per byte of tensors touched
  reduction_frac       share of instances that are reduction updates
  n_statements         number of statements in the code
  tile_k / reg_k       log2 of the first band's cache / register tile of member k (k < 3,
                       0 when untiled), each relative to the member's extent
  sink                 register loops sunk below the reduction
  fast_math, promote, vectorize, unroll, parallel   the switches
  fusion_max, fusion_smart, fusion_none            the fusion strategy, one-hot
  stream               outputs written with streaming stores
"""

from __future__ import annotations

import math

import numpy as np

_BASE = ["log_instances", "log_ops", "vector_frac", "vector_width", "parallel_frac",
         "log_parallel_extent", "parallel_balance", "unroll_frac", "log_unroll", "mean_depth",
         "innermost_trips", "stride0_frac", "stride1_frac", "strided_frac", "unknown_stride_frac",
         "local_frac", "log_bytes_touched", "log_intensity", "reduction_frac", "n_statements"]
_KNOBS = [f"tile_{k}" for k in range(3)] + [f"reg_{k}" for k in range(3)] + [
    "sink", "fast_math", "promote", "vectorize", "unroll", "parallel", "fusion_max", "fusion_smart",
    "fusion_none", "stream"]
FEATURE_NAMES = tuple(_BASE + _KNOBS)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def loop_nest_features(records, cores: int) -> list[float]:
    total = ops = vec = vec_w = par = unr = unr_p = depth = inner = red = 0.0
    par_extent = 1
    strides = np.zeros(4)  # invariant, unit, strided, unknown
    local = accesses = 0.0
    tensors: dict[str, int] = {}
    for r in records:
        n = float(np.prod([t for t, _ in r.loops], dtype=np.float64)) if r.loops else 1.0
        total += n
        ops += n * r.ops
        kinds = [k for _, k in r.loops]
        if "vector" in kinds:
            vec += n
            vec_w += n * next(t for t, k in r.loops if k == "vector")
        if "parallel" in kinds:
            par += n
            par_extent = max(par_extent, next(t for t, k in r.loops if k == "parallel"))
        unrolled = [t for t, k in r.loops if k == "unroll"]
        if unrolled:
            unr += n
            unr_p += n * float(np.prod(unrolled))
        depth += n * len(r.loops)
        inner += n * (r.loops[-1][0] if r.loops else 1)
        if r.role == "update":
            red += n
        for a in r.accesses:
            accesses += n
            if a.local:
                local += n
            else:
                slot = 3 if a.stride is None else 0 if a.stride == 0 else 1 if abs(a.stride) == 1 else 2
                strides[slot] += n
            tensors[a.tensor] = a.tensor_bytes
    total = max(total, 1.0)
    memory = max(strides.sum(), 1.0)
    touched = float(sum(tensors.values())) or 1.0
    return [
        _log2(total), _log2(ops), vec / total, vec_w / max(vec, 1.0), par / total, _log2(par_extent),
        min(par_extent / max(cores, 1), 8.0), unr / total, _log2(unr_p / max(unr, 1.0)), depth / total,
        _log2(inner / total), *(strides / memory), local / max(accesses, 1.0), _log2(touched),
        _log2(ops / touched), red / total, float(len(records)),
    ]


def knob_features(pipeline, config) -> list[float]:
    """The config's knobs as numbers, as the target's recipe describes them (the CPU's: see
    the tile/reg/sink/switch/fusion names above)."""
    return pipeline.recipe.knob_features(config, pipeline.bands)


def extract_features(pipeline, config, kernel) -> np.ndarray:
    """The feature vector of one built candidate (see FEATURE_NAMES)."""
    cores = getattr(pipeline.target, "cores", 1)
    values = loop_nest_features(kernel.records, cores) + knob_features(pipeline, config)
    return np.asarray(values, dtype=np.float32)

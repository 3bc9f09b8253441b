"""ONNX's recurrent ops in the ONNX op table (`ONNX_OPS`): RNN, GRU and LSTM, unrolled over the
static sequence length (the input projection of all steps is one matmul; each step a matmul
by R and the cell's gates), every direction, layout, activation, clip and sequence_lens."""

from __future__ import annotations

from typing import Callable

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx
from akg.graph.ir import Value

MAX_STEPS = 1024  # sequence length x directions unrolled at most

# activation name -> (how many of activation_alpha / activation_beta it takes, its form)
_ACTIVATIONS: dict[str, tuple[int, int]] = {
    "Sigmoid": (0, 0), "Tanh": (0, 0), "Relu": (0, 0), "Softsign": (0, 0), "Softplus": (0, 0),
    "Affine": (1, 1), "LeakyRelu": (1, 0), "ThresholdedRelu": (1, 0), "ScaledTanh": (1, 1),
    "HardSigmoid": (1, 1), "Elu": (1, 0),
}
_DEFAULT_ALPHA = {"LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "HardSigmoid": 0.2, "Elu": 1.0, "Affine": 1.0,
                  "ScaledTanh": 1.0}
_DEFAULT_BETA = {"HardSigmoid": 0.5, "Affine": 0.0, "ScaledTanh": 1.0}


def _activation(c: Ctx, name: str, alpha: float, beta: float) -> Callable[[Value, str], Value]:
    def s(value: float, x: Value, what: str) -> Value:
        return c.scalar(value, x, what)

    def apply(x: Value, what: str) -> Value:
        if name == "Sigmoid":
            return c.make("sigmoid", x, what=what)
        if name == "Tanh":
            return c.make("tanh", x, what=what)
        if name == "Relu":
            return c.make("relu", x, what=what)
        if name == "Softsign":
            return c.make("div", x, c.make("add", c.make("abs", x, what=f"{what}_abs"), s(1, x, "one"),
                                           what=f"{what}_den"), what=what)
        if name == "Softplus":
            return c.make("log", c.make("add", c.make("exp", x, what=f"{what}_exp"), s(1, x, "one"),
                                        what=f"{what}_1p"), what=what)
        if name == "Affine":
            return c.make("add", c.make("mul", x, s(alpha, x, f"{what}_a"), what=f"{what}_ax"),
                          s(beta, x, f"{what}_b"), what=what)
        if name == "LeakyRelu":
            return c.make("where", c.make("less", x, s(0, x, "zero"), what=f"{what}_neg"),
                          c.make("mul", x, s(alpha, x, f"{what}_a"), what=f"{what}_ax"), x, what=what)
        if name == "ThresholdedRelu":
            return c.make("where", c.make("greater", x, s(alpha, x, f"{what}_a"), what=f"{what}_on"), x,
                          s(0, x, "zero"), what=what)
        if name == "ScaledTanh":
            return c.make("mul", c.make("tanh", c.make("mul", x, s(beta, x, f"{what}_b"), what=f"{what}_bx"),
                                        what=f"{what}_t"), s(alpha, x, f"{what}_a"), what=what)
        if name == "HardSigmoid":
            y = c.make("add", c.make("mul", x, s(alpha, x, f"{what}_a"), what=f"{what}_ax"),
                       s(beta, x, f"{what}_b"), what=f"{what}_lin")
            return c.make("minimum", c.make("maximum", y, s(0, x, "zero"), what=f"{what}_lo"), s(1, x, "one"),
                          what=what)
        if name == "Elu":
            e = c.make("mul", c.make("sub", c.make("exp", x, what=f"{what}_exp"), s(1, x, "one"), what=f"{what}_em1"),
                       s(alpha, x, f"{what}_a"), what=f"{what}_neg_part")
            return c.make("where", c.make("less", x, s(0, x, "zero"), what=f"{what}_neg"), e, x, what=what)
        raise AssertionError(name)
    return apply


def _activations(c: Ctx, defaults: list[str], dirs: int) -> list[list[Callable[[Value, str], Value]]]:
    """The cell's activation functions per direction (the `activations` attribute, or the
    defaults), alphas and betas taken in order by the functions that use them."""
    names = c.get("activations", None) or defaults * dirs
    if len(names) == len(defaults) and dirs == 2:
        names = names * 2
    if len(names) != len(defaults) * dirs:
        raise c.fail(f"activations {names} need {len(defaults)} per direction")
    alphas = list(c.get("activation_alpha", None) or [])
    betas = list(c.get("activation_beta", None) or [])
    fns = []
    for name in names:
        canon = next((k for k in _ACTIVATIONS if k.lower() == str(name).lower()), None)
        if canon is None:
            raise c.unsupported(f"activation '{name}' is not modelled ({', '.join(_ACTIVATIONS)} are)")
        na, nb = _ACTIVATIONS[canon]
        alpha = alphas.pop(0) if na and alphas else _DEFAULT_ALPHA.get(canon, 0.0)
        beta = betas.pop(0) if nb and betas else _DEFAULT_BETA.get(canon, 0.0)
        fns.append(_activation(c, canon, float(alpha), float(beta)))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(dirs)]


def _pick(c: Ctx, v: Value, d: int, what: str) -> Value:
    """v[d] of a per-direction tensor [dirs, ...]."""
    part = c.make("slice", v, begin=[d] + [0] * (len(v.shape) - 1), end=[d + 1, *v.shape[1:]], what=f"{what}_s")
    return c.make("reshape", part, shape=list(v.shape[1:]), what=what)


def _cols(c: Ctx, v: Value, k: int, size: int, what: str) -> Value:
    """The k-th block of `size` columns of a 2-D v."""
    return c.make("slice", v, begin=[0, k * size], end=[v.shape[0], (k + 1) * size], what=what)


class _Recurrence:
    """What RNN, GRU and LSTM share: the inputs read per the layout, the input projection of
    all steps at once, the per-step recurrent product, and the outputs stacked."""

    def __init__(self, c: Ctx, gates: int, defaults: list[str]):
        self.c = c
        x = c.v(0)
        self.layout = c.int_("layout", 0)
        if self.layout:
            x = c.make("transpose", x, perm=[1, 0, 2], what="time_major")
        self.x = x
        self.seq, self.batch, self.width = x.shape
        w, r = c.v(1), c.v(2)
        self.hidden = c.int_("hidden_size", r.shape[-1])
        direction = c.str_("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise c.fail(f"direction '{direction}' is not forward, reverse or bidirectional")
        self.direction = direction
        self.dirs = 2 if direction == "bidirectional" else 1
        if w.shape[0] != self.dirs:
            raise c.fail(f"W {w.type} has {w.shape[0]} directions, direction '{direction}' needs {self.dirs}")
        if self.seq * self.dirs > MAX_STEPS:
            raise c.unsupported(f"a sequence of {self.seq} steps x {self.dirs} directions is past the "
                                f"{MAX_STEPS} steps unrolled")
        self.gates, self.w, self.r = gates, w, r
        self.b = c.v(3) if c.has(3) else None
        self.clip = c.get("clip", None)
        self.fns = _activations(c, defaults, self.dirs)
        self.mask = self._mask()

    def _mask(self) -> list[Value] | None:
        """Per step, which batch entries are still inside their sequence (sequence_lens), [batch, 1]."""
        c = self.c
        if not c.has(4):
            return None
        data = c.imp.known(c.v(4))
        if data is not None and (np.asarray(data) == self.seq).all():
            return None
        lens = c.make("reshape", c.make("cast", c.v(4), to="int64", what="lens64"), shape=[self.batch, 1],
                      what="lens")
        return [c.make("less", c.scalar(t, "int64", f"t{t}"), lens, what=f"live{t}") for t in range(self.seq)]

    def state(self, index: int, d: int, what: str) -> Value:
        """initial_h / initial_c for direction d ([batch, hidden]), zeros when left out."""
        c = self.c
        dtype = self.x.dtype
        if not c.has(index):
            return c.const(np.zeros((self.batch, self.hidden), dtype), dtype, f"{what}_zero")
        v = c.v(index)
        if self.layout:
            v = c.make("transpose", v, perm=[1, 0, 2], what=f"{what}_dir_major")
        return _pick(c, v, d, f"{what}{d}")

    def projected(self, d: int) -> tuple[Value, Value, Value | None]:
        """(x W^T + Wb for all steps [seq, batch, gates*hidden], R_d [gates*hidden, hidden], Rb_d)."""
        c = self.c
        n = self.gates * self.hidden
        wd = _pick(c, self.w, d, f"w{d}")
        rows = c.make("reshape", self.x, shape=[self.seq * self.batch, self.width], what="rows")
        xw = c.make("matmul", rows, wd, transpose_b=True, what=f"xw{d}")
        rb = None
        if self.b is not None:
            bd = _pick(c, self.b, d, f"b{d}")
            wb = c.make("slice", bd, begin=[0], end=[n], what=f"wb{d}")
            rb = c.make("slice", bd, begin=[n], end=[2 * n], what=f"rb{d}")
            xw = c.make("add", xw, wb, what=f"xwb{d}")
        xw = c.make("reshape", xw, shape=[self.seq, self.batch, n], what=f"xw_steps{d}")
        return xw, _pick(c, self.r, d, f"r{d}"), rb

    def step_input(self, xw: Value, t: int, d: int) -> Value:
        c = self.c
        n = xw.shape[-1]
        part = c.make("slice", xw, begin=[t, 0, 0], end=[t + 1, self.batch, n], what=f"x{d}_{t}_s")
        return c.make("reshape", part, shape=[self.batch, n], what=f"x{d}_{t}")

    def clipped(self, v: Value, what: str) -> Value:
        if self.clip is None:
            return v
        c = self.c
        limit = float(self.clip)
        v = c.make("maximum", v, c.scalar(-limit, v, "clip_low"), what=f"{what}_lo")
        return c.make("minimum", v, c.scalar(limit, v, "clip_high"), what=f"{what}_clip")

    def steps(self, d: int) -> list[int]:
        forward = self.direction == "forward" or self.direction == "bidirectional" and d == 0
        return list(range(self.seq)) if forward else list(range(self.seq - 1, -1, -1))

    def keep(self, t: int, new: Value, old: Value, what: str) -> Value:
        """The new state where step t is inside the sequence, the old one past its end."""
        if self.mask is None:
            return new
        return self.c.make("where", self.mask[t], new, old, what=what)

    def output(self, y: Value, t: int, what: str) -> Value:
        """Y at step t: zeros past a sequence's end."""
        if self.mask is None:
            return y
        c = self.c
        return c.make("where", self.mask[t], y, c.scalar(0, y, "zero"), what=what)

    def finish(self, ys: list[list[Value]], finals: list[list[Value]]) -> tuple[Value, ...]:
        """Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]) and the final
        states [dirs, batch, hidden] (layout 1: [batch, dirs, hidden])."""
        c = self.c
        out = []
        per_dir = []
        for d, steps in enumerate(ys):
            rows = [c.make("reshape", y, shape=[1, 1, self.batch, self.hidden], what=f"y{d}_{t}")
                    for t, y in enumerate(steps)]
            per_dir.append(rows[0] if len(rows) == 1 else c.make("concat", *rows, axis=0, what=f"y{d}"))
        y = per_dir[0] if self.dirs == 1 else c.make("concat", *per_dir, axis=1, what="y_dirs")
        if self.layout:
            y = c.make("transpose", y, perm=[2, 0, 1, 3], what="y_batch_major")
        out.append(c.make("reshape", y, shape=y.shape, what="y"))
        for k, states in enumerate(finals):
            rows = [c.make("reshape", h, shape=[1, self.batch, self.hidden], what=f"final{k}_{d}")
                    for d, h in enumerate(states)]
            f = rows[0] if self.dirs == 1 else c.make("concat", *rows, axis=0, what=f"final{k}")
            if self.layout:
                f = c.make("transpose", f, perm=[1, 0, 2], what=f"final{k}_batch_major")
            out.append(c.make("reshape", f, shape=f.shape, what=f"state{k}"))
        return tuple(out)


def _recurrent_product(c: Ctx, h: Value, r: Value, rb: Value | None, lo: int, hi: int, what: str) -> Value:
    """h R[lo:hi]^T (+ Rb[lo:hi])."""
    rs = c.make("slice", r, begin=[lo, 0], end=[hi, r.shape[1]], what=f"{what}_r") if (lo, hi) != (0, r.shape[0]) else r
    out = c.make("matmul", h, rs, transpose_b=True, what=what)
    if rb is not None:
        out = c.make("add", out, c.make("slice", rb, begin=[lo], end=[hi], what=f"{what}_rb"), what=f"{what}_b")
    return out


@ONNX_OPS.register_op("RNN", "matmul, add, tanh (unrolled)")
def _rnn(c: Ctx):
    rec = _Recurrence(c, 1, ["Tanh"])
    n = rec.hidden
    ys, finals = [], []
    for d in range(rec.dirs):
        xw, r, rb = rec.projected(d)
        (f,) = rec.fns[d]
        h = rec.state(5, d, "h0_")
        outs = {}
        for t in rec.steps(d):
            pre = c.make("add", rec.step_input(xw, t, d), _recurrent_product(c, h, r, rb, 0, n, f"hr{d}_{t}"),
                         what=f"pre{d}_{t}")
            new = f(rec.clipped(pre, f"pre{d}_{t}"), f"h{d}_{t}")
            outs[t] = rec.output(new, t, f"out{d}_{t}")
            h = rec.keep(t, new, h, f"kept{d}_{t}")
        ys.append([outs[t] for t in range(rec.seq)])
        finals.append(h)
    return rec.finish(ys, [finals])


@ONNX_OPS.register_op("GRU", "matmul, add, sigmoid, tanh, mul (unrolled)")
def _gru(c: Ctx):
    rec = _Recurrence(c, 3, ["Sigmoid", "Tanh"])
    n = rec.hidden
    linear = bool(c.int_("linear_before_reset", 0))
    ys, finals = [], []
    for d in range(rec.dirs):
        xw, r, rb = rec.projected(d)
        f, g = rec.fns[d]
        h = rec.state(5, d, "h0_")
        outs = {}
        for t in rec.steps(d):
            x = rec.step_input(xw, t, d)
            zr = c.make("add", _cols(c, x, 0, 2 * n, f"xzr{d}_{t}"),
                        _recurrent_product(c, h, r, rb, 0, 2 * n, f"hzr{d}_{t}"), what=f"zr_pre{d}_{t}")
            zr = f(rec.clipped(zr, f"zr{d}_{t}"), f"zr{d}_{t}")
            z, rr = _cols(c, zr, 0, n, f"z{d}_{t}"), _cols(c, zr, 1, n, f"r{d}_{t}")
            if linear:
                hh = c.make("mul", rr, _recurrent_product(c, h, r, rb, 2 * n, 3 * n, f"hh{d}_{t}"),
                            what=f"reset{d}_{t}")
            else:
                hh = _recurrent_product(c, c.make("mul", rr, h, what=f"rh{d}_{t}"), r, rb, 2 * n, 3 * n,
                                        f"reset{d}_{t}")
            cand = g(rec.clipped(c.make("add", _cols(c, x, 2, n, f"xh{d}_{t}"), hh, what=f"cand_pre{d}_{t}"),
                                 f"cand{d}_{t}"), f"cand{d}_{t}")
            one = c.scalar(1, z, "one")
            new = c.make("add", c.make("mul", c.make("sub", one, z, what=f"keep_new{d}_{t}"), cand,
                                       what=f"from_new{d}_{t}"),
                         c.make("mul", z, h, what=f"from_old{d}_{t}"), what=f"h{d}_{t}")
            outs[t] = rec.output(new, t, f"out{d}_{t}")
            h = rec.keep(t, new, h, f"kept{d}_{t}")
        ys.append([outs[t] for t in range(rec.seq)])
        finals.append(h)
    return rec.finish(ys, [finals])


@ONNX_OPS.register_op("LSTM", "matmul, add, sigmoid, tanh, mul (unrolled)")
def _lstm(c: Ctx):
    rec = _Recurrence(c, 4, ["Sigmoid", "Tanh", "Tanh"])
    n = rec.hidden
    couple = bool(c.int_("input_forget", 0))
    ys, hs, cs = [], [], []
    for d in range(rec.dirs):
        xw, r, rb = rec.projected(d)
        f, g, hf = rec.fns[d]
        h, cell = rec.state(5, d, "h0_"), rec.state(6, d, "c0_")
        peep = _pick(c, c.v(7), d, f"p{d}") if c.has(7) else None

        def peephole(k: int, state: Value, what: str) -> Value | None:
            if peep is None:
                return None
            return c.make("mul", c.make("slice", peep, begin=[k * n], end=[(k + 1) * n], what=f"{what}_p"), state,
                          what=what)

        outs = {}
        for t in rec.steps(d):
            pre = c.make("add", rec.step_input(xw, t, d), _recurrent_product(c, h, r, rb, 0, 4 * n, f"hr{d}_{t}"),
                         what=f"pre{d}_{t}")
            gi, go, gf, gc = (_cols(c, pre, k, n, f"{name}{d}_{t}") for k, name in enumerate("iofc"))
            pi, pf = peephole(0, cell, f"pi{d}_{t}"), peephole(2, cell, f"pf{d}_{t}")
            if pi is not None:
                gi = c.make("add", gi, pi, what=f"i_peep{d}_{t}")
                gf = c.make("add", gf, pf, what=f"f_peep{d}_{t}")
            i = f(rec.clipped(gi, f"i{d}_{t}"), f"i_act{d}_{t}")
            if couple:
                fg = c.make("sub", c.scalar(1, i, "one"), i, what=f"f_act{d}_{t}")
            else:
                fg = f(rec.clipped(gf, f"f{d}_{t}"), f"f_act{d}_{t}")
            cand = g(rec.clipped(gc, f"c{d}_{t}"), f"c_act{d}_{t}")
            new_c = c.make("add", c.make("mul", fg, cell, what=f"forget{d}_{t}"),
                           c.make("mul", i, cand, what=f"write{d}_{t}"), what=f"cell{d}_{t}")
            po = peephole(1, new_c, f"po{d}_{t}")
            if po is not None:
                go = c.make("add", go, po, what=f"o_peep{d}_{t}")
            o = f(rec.clipped(go, f"o{d}_{t}"), f"o_act{d}_{t}")
            new_h = c.make("mul", o, hf(new_c, f"cell_act{d}_{t}"), what=f"h{d}_{t}")
            outs[t] = rec.output(new_h, t, f"out{d}_{t}")
            h = rec.keep(t, new_h, h, f"kept_h{d}_{t}")
            cell = rec.keep(t, new_c, cell, f"kept_c{d}_{t}")
        ys.append([outs[t] for t in range(rec.seq)])
        hs.append(h)
        cs.append(cell)
    return rec.finish(ys, [hs, cs])

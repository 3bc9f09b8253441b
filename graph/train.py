"""Training steps (after `graph/autodiff`): forward, backward and an optimizer update as one
graph, run step after step by feeding its outputs back as its inputs.

A step graph takes the model's data inputs, then the parameters (the model's constants chosen
for training, turned into inputs of the same names), then the optimizer state
(`opt.<slot>.<param>` per parameter, and `opt.step` for Adam). Its outputs are the loss and,
for every parameter and state input `X`, the next value `new.X`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping, Sequence

import numpy as np

from akg.errors import InputError, InvalidGraphError
from akg.graph.autodiff import VjpEmitter, _builder_over, _resolve, grad, rebuilt, trainable_params
from akg.graph.interpreter import evaluate
from akg.graph.ir import Graph, Value
from akg.graph.memory import require_values
from akg.graph.types import is_float
from akg.registry import Registry

NEW = "new."  # output `new.X` is the next value of input `X`
STATE = "opt."

# --- optimizers ---------------------------------------------------------------------------------

OPTIMIZERS: Registry[type] = Registry("optimizer")


def defoptimizer(name: str):
    def wrap(cls):
        OPTIMIZERS.register(name, cls)
        return cls
    return wrap


@defoptimizer("sgd")
@dataclass(frozen=True)
class Sgd:
    """SGD with (heavy-ball) momentum as PyTorch: v' = momentum v + g; p' = p - lr v'."""

    lr: float = 0.01
    momentum: float = 0.0
    name = "sgd"

    @property
    def slots(self) -> tuple[str, ...]:
        return ("momentum",) if self.momentum else ()

    globals_ = ()

    def update_globals(self, e: VjpEmitter, state: Mapping[str, Value]) -> dict[str, Value]:
        return {}

    def update(self, e: VjpEmitter, p: Value, g: Value, state: Mapping[str, Value],
               glob: Mapping[str, Value]) -> tuple[Value, dict[str, Value]]:
        if not self.momentum:
            return e.op("sub", p, e.op("mul", g, self.lr, hint="step")), {}
        v = e.op("add", e.op("mul", state["momentum"], self.momentum, hint="decayed"), g, hint="momentum")
        return e.op("sub", p, e.op("mul", v, self.lr, hint="step")), {"momentum": v}


@defoptimizer("adam")
@dataclass(frozen=True)
class Adam:
    """Adam as PyTorch: t' = t + 1; m' = b1 m + (1 - b1) g; v' = b2 v + (1 - b2) g^2;
    p' = p - lr (m' / (1 - b1^t')) / (sqrt(v' / (1 - b2^t')) + eps)."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    name = "adam"
    slots = ("m", "v")
    globals_ = ("step",)

    def update_globals(self, e: VjpEmitter, state: Mapping[str, Value]) -> dict[str, Value]:
        return {"step": e.op("add", state["step"], 1.0, hint="step")}

    def update(self, e: VjpEmitter, p: Value, g: Value, state: Mapping[str, Value],
               glob: Mapping[str, Value]) -> tuple[Value, dict[str, Value]]:
        b1, b2 = self.betas
        t = glob["step"] if glob["step"].dtype == p.dtype else e.op("cast", glob["step"], to=p.dtype, hint="t")
        c1 = e.op("sub", 1.0, e.op("pow", e.const(b1, like=p), t), hint="c1")
        c2 = e.op("sub", 1.0, e.op("pow", e.const(b2, like=p), t), hint="c2")
        m = e.op("add", e.op("mul", state["m"], b1), e.op("mul", g, 1 - b1), hint="m")
        v = e.op("add", e.op("mul", state["v"], b2), e.op("mul", e.op("mul", g, g), 1 - b2), hint="v")
        denom = e.op("add", e.op("sqrt", e.op("div", v, c2, hint="vhat")), self.eps, hint="denom")
        step = e.op("mul", e.op("div", e.op("div", m, c1, hint="mhat"), denom), self.lr, hint="step")
        return e.op("sub", p, step), {"m": m, "v": v}


def make_optimizer(optimizer: str | object, **settings) -> object:
    """An optimizer from its name and settings (None settings take the defaults); an
    optimizer object is returned as it is."""
    if not isinstance(optimizer, str):
        return optimizer
    cls = OPTIMIZERS.get(optimizer)
    known = [f.name for f in fields(cls)]
    given = {k: v for k, v in settings.items() if v is not None}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise InputError(f"optimizer '{optimizer}' has no setting '{unknown[0]}' (its settings: {', '.join(known)})")
    if "betas" in given:
        given["betas"] = tuple(float(b) for b in given["betas"])
    return cls(**given)


# --- step graphs --------------------------------------------------------------------------------


def params_as_inputs(graph: Graph, params: Sequence[str | Value]) -> Graph:
    """`graph` with the named constants turned into inputs of the same names, after its own."""
    chosen = [_resolve(graph, p, "param") for p in params]
    for v in chosen:
        if v not in graph.constants:
            raise InvalidGraphError(f"param %{v.name} is not a constant of graph '{graph.name}'")
    lifted = set(chosen)
    return Graph(graph.name, [*graph.inputs, *chosen], graph.outputs, graph.nodes,
                 {v: a for v, a in graph.constants.items() if v not in lifted})


def train_step(graph: Graph, loss: str | Value, params: Sequence[str | Value] | None = None,
               optimizer: str | object = "sgd", **settings) -> Graph:
    """One training step of `graph` as a graph (see the module docstring for its inputs and
    outputs). `params` default to `trainable_params(graph, loss)`; `optimizer` is "sgd"
    (settings lr, momentum) or "adam" (lr, betas, eps), or an optimizer object."""
    chosen = trainable_params(graph, loss) if params is None else [_resolve(graph, p, "param") for p in params]
    if not chosen:
        raise InvalidGraphError(f"graph '{graph.name}' has no parameters to train")
    names = [v.name for v in chosen]
    return train_step_of_inputs(params_as_inputs(graph, names), loss, names, optimizer, **settings)


def train_step_of_inputs(graph: Graph, loss: str | Value, params: Sequence[str], optimizer: str | object = "sgd",
                         **settings) -> Graph:
    """`train_step` for parameters that are already inputs of `graph` (models too big to hold
    their weights as constants, e.g. the GPT specs of akg.graph.parallel.gpt)."""
    opt = make_optimizer(optimizer, **settings)
    by_name = {v.name: v for v in graph.inputs}
    for name in params:
        v = by_name.get(name)
        if v is None:
            raise InvalidGraphError(f"param %{name} is not an input of graph '{graph.name}'")
        if not is_float(v.dtype):
            raise InvalidGraphError(f"param %{v.name} is {v.type}, not floating-point")
    loss_name = loss if isinstance(loss, str) else loss.name
    grads = grad(graph, loss_name, list(params))
    clash = [v.name for v in grads.values if v.name.startswith((NEW, STATE))]
    if clash:
        raise InvalidGraphError(f"graph '{graph.name}' already has a value %{clash[0]}: "
                                f"'{NEW}' and '{STATE}' name a training step's state")
    b = _builder_over(grads)
    hints: dict[Value, str] = {}
    renames: dict[Value, str] = {}
    loss_v, *gs = grads.outputs
    by_name = {v.name: v for v in grads.inputs}
    ps = [by_name[n] for n in params]
    state = {(slot, p.name): b.input(f"{STATE}{slot}.{p.name}", p.shape, p.dtype)
             for slot in opt.slots for p in ps}
    glob = {name: b.input(f"{STATE}{name}", (), "float32") for name in opt.globals_}
    new_glob = opt.update_globals(VjpEmitter(b, hints, "update", ()), glob)
    new_params, new_state = [], {}
    for p, g in zip(ps, gs):
        e = VjpEmitter(b, hints, f"update.{p.name}", ())
        new_p, slots = opt.update(e, p, g, {s: state[s, p.name] for s in opt.slots}, new_glob)
        new_params.append(new_p)
        renames[new_p] = f"{NEW}{p.name}"
        for s, v in slots.items():
            new_state[s, p.name] = v
            renames[v] = f"{NEW}{STATE}{s}.{p.name}"
    for name, v in new_glob.items():
        renames[v] = f"{NEW}{STATE}{name}"
    b.output(loss_v, *new_params, *(new_state[k] for k in state), *(new_glob[k] for k in glob))
    return rebuilt(b.build(), renames, hints)


def with_mean_square_loss(graph: Graph, name: str = "loss") -> Graph:
    """`graph` whose one output is a scalar loss `name`: the mean of its first output squared
    (a loss for models that have none, to train them in tests and benchmarks)."""
    b = _builder_over(graph)
    out = graph.outputs[0]
    b.output(b.op("mean", b.op("mul", out, out, name=b.unique("squared")), name=name))
    return b.build()


# --- running steps ------------------------------------------------------------------------------


def state_names(step: Graph) -> list[str]:
    """The inputs of a step graph that its outputs feed back (parameters and optimizer state)."""
    outs = {v.name for v in step.outputs}
    return [v.name for v in step.inputs if NEW + v.name in outs]


def initial_state(model: Graph, step: Graph) -> dict[str, np.ndarray]:
    """Parameters as the model holds them, zero optimizer state."""
    weights = {v.name: a for v, a in model.constants.items()}
    require_values([v for v in step.inputs if v.name in state_names(step)], f"training step '{step.name}'",
                   "for its state")
    out = {}
    for v in step.inputs:
        if v.name not in state_names(step):
            continue
        if v.name in weights:
            out[v.name] = np.array(weights[v.name])
        else:
            out[v.name] = np.zeros(v.shape, v.dtype)
    return out


def run_step(step: Graph, state: Mapping[str, np.ndarray], batch: Mapping[str, np.ndarray]
             ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One step in the reference interpreter: (loss, next state)."""
    outs = evaluate(step, {**batch, **state})
    nxt = {v.name[len(NEW):]: a for v, a in zip(step.outputs, outs) if v.name.startswith(NEW)}
    return outs[0], nxt

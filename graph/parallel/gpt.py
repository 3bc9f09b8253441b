"""GPT training-step graphs at the sizes of the auto-parallel benchmark (Megatron's GPT specs),
built with the GraphBuilder, parameters as graph inputs (no weight is ever allocated), the
backward pass by `graph/autodiff` and the optimizer update as `graph/train` writes it.

The graph is what `graph/parallel/search.py` plans for: forward, backward and update of one
(micro)batch, the loss first, then `new.X` for every parameter and optimizer state `X`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from akg.errors import InputError
from akg.graph.builder import GraphBuilder
from akg.graph.ir import Graph
from akg.graph.train import STATE, train_step_of_inputs


@dataclass(frozen=True)
class GptSpec:
    """A decoder-only transformer: `layers` blocks of attention and MLP (4x hidden) with
    pre-layer-norm and residuals, tied input/output embeddings, learned positions."""

    name: str
    hidden: int
    layers: int
    heads: int
    seq: int = 1024
    vocab: int = 51200
    dtype: str = "bfloat16"

    @property
    def params(self) -> int:
        """The number of parameters (weights and biases)."""
        h = self.hidden
        per_layer = 4 * h * h + 4 * h + 8 * h * h + 5 * h + 4 * h  # attention, mlp, two norms
        return self.layers * per_layer + self.vocab * h + self.seq * h + 2 * h

    def with_layers(self, layers: int) -> "GptSpec":
        return replace(self, name=f"{self.name}-{layers}l", layers=layers)


# Megatron-LM's GPT configurations (hidden, layers, heads); seq 1024, vocab 51200
SPECS = {
    "gpt-350m": GptSpec("gpt-350m", 1024, 24, 16),
    "gpt-2.6b": GptSpec("gpt-2.6b", 2560, 32, 32),
    "gpt-39b": GptSpec("gpt-39b", 8192, 48, 64),
}


def spec(name: str) -> GptSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise InputError(f"unknown GPT spec '{name}' (known: {', '.join(SPECS)})") from None


def forward(s: GptSpec, batch: int) -> Graph:
    """The forward pass and mean cross-entropy loss of `batch` sequences; inputs: `tokens`
    and `labels` (int32), the causal `mask` (added to the scores), then the parameters."""
    b = GraphBuilder(s.name)
    h, a, n = s.hidden, s.heads, batch * s.seq
    d = h // a
    if h % a:
        raise InputError(f"hidden {h} is not a multiple of the {a} heads")
    dt = s.dtype
    tokens = b.input("tokens", (n,), "int32")
    labels = b.input("labels", (n,), "int32")
    mask = b.input("mask", (s.seq, s.seq), dt)

    def param(name, *shape):
        return b.input(name, shape, dt)

    wte = param("wte", s.vocab, h)
    wpe = param("wpe", s.seq, h)
    x = b.op("gather", wte, tokens, name="embed")
    x = b.op("reshape", x, shape=[batch, s.seq, h], name="embed.seq")
    x = b.op("add", x, wpe, name="embed.pos")
    x = b.op("reshape", x, shape=[n, h], name="h0")

    def norm(x, name):
        g, beta = param(f"{name}.gamma", h), param(f"{name}.beta", h)
        return b.op("layer_norm", x, g, beta, name=name)

    def dense(x, name, n_in, n_out):
        w, bias = param(f"{name}.weight", n_in, n_out), param(f"{name}.bias", n_out)
        return b.op("add", b.op("matmul", x, w, name=f"{name}.mm"), bias, name=name)

    def heads(x, name):  # [n, h] -> [batch, a, seq, d]
        x = b.op("reshape", x, shape=[batch, s.seq, a, d], name=f"{name}.heads")
        return b.op("transpose", x, perm=[0, 2, 1, 3], name=f"{name}.t")

    for i in range(s.layers):
        p = f"l{i}"
        y = norm(x, f"{p}.ln1")
        q, k, v = (heads(dense(y, f"{p}.{w}", h, h), f"{p}.{w}") for w in ("q", "k", "v"))
        scores = b.op("batch_matmul", q, k, transpose_b=True, name=f"{p}.scores")
        scores = b.op("mul", scores, 1.0 / d ** 0.5, name=f"{p}.scaled")
        scores = b.op("add", scores, mask, name=f"{p}.masked")
        probs = b.op("softmax", scores, name=f"{p}.probs")
        ctx = b.op("batch_matmul", probs, v, name=f"{p}.ctx")
        ctx = b.op("transpose", ctx, perm=[0, 2, 1, 3], name=f"{p}.ctx.t")
        ctx = b.op("reshape", ctx, shape=[n, h], name=f"{p}.ctx.merged")
        x = b.op("add", x, dense(ctx, f"{p}.proj", h, h), name=f"{p}.res1")
        y = norm(x, f"{p}.ln2")
        y = b.op("gelu", dense(y, f"{p}.fc1", h, 4 * h), name=f"{p}.act")
        x = b.op("add", x, dense(y, f"{p}.fc2", 4 * h, h), name=f"{p}.res2")
    x = norm(x, "lnf")
    logits = b.op("matmul", x, wte, transpose_b=True, name="logits")
    loss = b.op("cross_entropy", logits, labels, name="loss")
    b.output(loss)
    return b.build()


PARAMS_AFTER = 3  # inputs before the parameters: tokens, labels, mask


def train_graph(s: GptSpec, batch: int, optimizer: str = "adam") -> Graph:
    """One training step of `forward(s, batch)` as `graph/train.train_step` lays it out:
    the loss, then `new.X` for every parameter and optimizer state input `X`."""
    fwd = forward(s, batch)
    params = [v.name for v in fwd.inputs[PARAMS_AFTER:]]
    return step_of_inputs(fwd, "loss", params, optimizer)


def step_of_inputs(graph: Graph, loss: str, params: list[str], optimizer: str = "adam", **settings) -> Graph:
    """`graph/train.train_step` for parameters that are already graph inputs (models too big
    to hold their weights as constants): `train_step_of_inputs`."""
    return train_step_of_inputs(graph, loss, params, optimizer, **settings)


def build(name_or_spec: str | GptSpec, batch: int, *, layers: int | None = None,
          optimizer: str = "adam") -> Graph:
    """The training step of a named spec (`gpt-350m`, `gpt-2.6b`, `gpt-39b`), optionally with
    another number of layers."""
    s = spec(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    if layers is not None:
        s = s.with_layers(layers)
    return train_graph(s, batch, optimizer)


__all__ = ["GptSpec", "SPECS", "spec", "forward", "train_graph", "step_of_inputs", "build", "megatron_pins",
           "data_parallel_pins"]


# --- Megatron-LM's layout, the baseline of the benchmark ---------------------------------------

COLUMN = ("q", "k", "v", "fc1")  # weights [in, out] split by columns, with their biases
ROW = ("proj", "fc2")  # weights split by rows (their outputs are partial sums), biases whole


def megatron_pins(graph: Graph, mesh, dp: str = "dp", tp: str = "tp") -> dict:
    """Megatron-LM's shardings for `graph` (a `train_graph`) on `mesh`: the batch over `dp`,
    column-parallel q/k/v/fc1 and row-parallel proj/fc2 over `tp`, the vocabulary-parallel
    embedding, norms and positions replicated; every optimizer state as its parameter; all
    parameters replicated over `dp`. With tp of size 1 (or absent) this is pure data
    parallelism. Axes of size 1 are left out."""
    from akg.graph.parallel.sharding import Sharding

    names = {n for n, size in mesh.axes if size > 1}
    d = (dp,) if dp in names else ()
    t = (tp,) if tp in names else ()
    pins: dict[str, Sharding] = {}
    for v in graph.inputs:
        name = v.name
        base = name.split(".", 2)[2] if name.startswith(STATE) and name.count(".") >= 2 else name
        if name == f"{STATE}step":
            continue
        if base in ("tokens", "labels"):
            pins[name] = Sharding((d,))
            continue
        parts = base.split(".")
        if base == "wte":
            s = Sharding((t, ()))
        elif len(parts) == 3 and parts[1] in COLUMN:
            s = Sharding(((), t)) if parts[2] == "weight" else Sharding((t,))
        elif len(parts) == 3 and parts[1] in ROW and parts[2] == "weight":
            s = Sharding((t, ()))
        else:
            s = Sharding.replicated(v.type.rank)
        pins[name] = s
    return pins


def data_parallel_pins(graph: Graph, mesh, dp: str = "dp") -> dict:
    """Pure data parallelism: the batch split over `dp`, every other input replicated."""
    from akg.graph.parallel.sharding import Sharding

    d = (dp,) if dict(mesh.axes).get(dp, 1) > 1 else ()
    return {v.name: (Sharding((d,)) if v.name in ("tokens", "labels") else Sharding.replicated(v.type.rank))
            for v in graph.inputs if v.name != f"{STATE}step"}

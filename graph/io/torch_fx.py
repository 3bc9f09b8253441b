"""Importer for PyTorch FX graphs (graph stage: a torch.fx.GraphModule of ATen ops -> Graph).

What comes in is an ATen-level GraphModule, as `aot_autograd` hands to its compilers or as
`to_aten` makes from an `nn.Module` (or a torch-level GraphModule) and example inputs with
`make_fx` and the decomposition table `DECOMPOSITIONS` (torch's core-ATen decompositions).
`ATEN_OPS` maps each ATen op, by its packet name (`aten.addmm`), onto registry ops.

* `.pt2` files (`torch.export.save`) load through the same table (`load_pt2`).
* Placeholders are the graph inputs, named after the FX node; their types come from the
  node's `meta["val"]` (or `tensor_meta`), else from the example inputs. `get_attr` tensors
  (weights traced into the graph) are constants.
* Each node's result is checked against the type torch recorded for it (`meta["val"]`): a
  mapping that disagrees is an error, never a silently wrong graph. Shapes a converter needs
  (`view`, `expand` with -1) are taken from there too.
* Multi-output ops give tuples, picked by `operator.getitem`; the items akg does not compute
  (`max_pool2d_with_indices`' indices, batch-norm statistics) are unsupported if used.
* An op without a mapping, or used in a way that is not modelled, raises UnsupportedOpError
  naming the FX node and the ATen op. torch is imported only when a torch object comes in.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from akg.errors import ImportFormatError
from akg.graph.io.importer import (Frontend, ImportFail, Importer, OpContext, OpTable, graph_name_of,
                                   register_frontend)
from akg.graph.ir import Graph, Value
from akg.graph.types import TensorType

ATEN_OPS = OpTable("ATen op")
FILE = "<torch.fx>"

_DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "int64": "int64",
           "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool"}


def dtype_name(dtype: Any) -> str | None:
    """The akg dtype of a torch dtype (None for those akg has not: bfloat16, complex, ...)."""
    return _DTYPES.get(str(dtype).removeprefix("torch."))


def op_name(target: Any) -> str:
    """The ATen op's packet name (`aten.addmm`) of an FX call_function target."""
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return str(packet)
    if target is operator.getitem:
        return "getitem"
    return getattr(target, "__name__", str(target))


@dataclass(frozen=True)
class Unavailable:
    """An item of a multi-output op that akg does not compute; an error if anything uses it."""

    what: str


@dataclass(frozen=True)
class TorchModel:
    """An nn.Module or GraphModule with the example inputs it is traced with (what
    `akg.compile(module, example_inputs=...)` wraps)."""

    module: Any
    example_inputs: tuple


# --- the importer -------------------------------------------------------------------------------


class FxContext(OpContext):
    """One FX node: `args` converted (Values for tensors, Python values otherwise), `attrs` its
    kwargs, `out` the torch type of its result (`meta["val"]`)."""

    mismatch = "the op gives {got} but torch recorded {want}"

    def __init__(self, imp: FxImporter, node: Any, args: list[Any], attrs: dict[str, Any]):
        super().__init__(imp, op_name(node.target), attrs, args, node.name,
                         f"node '{node.name}' ({node.target})")
        self.node = node
        self.out = node.meta.get("val")

    def arg(self, i: int, name: str, default: Any = None) -> Any:
        """Positional argument `i`, else keyword `name`, else `default`."""
        if i < len(self.args):
            return self.args[i]
        return self.attrs.get(name, default)

    def out_type(self, i: int | None = None) -> TensorType:
        val = self.out if i is None else self.out[i]
        t = tensor_type(val)
        if t is None:
            raise self.unsupported(f"no tensor type recorded for the result ({type(val).__name__})")
        return t

    def tensor(self, x: Any, dtype: str | None = None) -> Value:
        """`x` as a Value of `dtype` (a Python number becomes a constant; a tensor of another
        dtype is cast)."""
        if dtype is None:
            first = self.out[0] if isinstance(self.out, (tuple, list)) and self.out else self.out
            dtype = tensor_type(first).dtype if tensor_type(first) is not None else None
        if isinstance(x, Value):
            if dtype is None:
                return x
            return x if x.dtype == dtype else self.emit("cast", [x], "cast", to=dtype)
        if isinstance(x, (bool, int, float)) and dtype is not None:
            return self.const(x, dtype, "scalar")
        raise self.fail(f"expected a tensor or a number, got {type(x).__name__}")

    def conform(self, result: Any) -> Any:
        if isinstance(result, tuple):
            return tuple(r if isinstance(r, Unavailable) else self.match_declared(r, self.out_type(i))
                         for i, r in enumerate(result))
        if isinstance(result, Value):
            return self.match_declared(result, self.out_type())
        return result


class FxImporter(Importer):
    """An ATen-level GraphModule -> Graph. `example_inputs` gives the placeholders' types where
    their nodes carry none."""

    format_name = "torch.fx graph"
    ops = ATEN_OPS

    def __init__(self, gm: Any, example_inputs: Sequence[Any] = (), graph_name: str = "torch",
                 frozen: dict[int, Any] | None = None):
        super().__init__(FILE, graph_name)
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.frozen = dict(frozen or {})  # placeholder index -> its value, imported as a constant
        self.output_map: list[tuple[str, int]] = []  # per FX output: ("graph"|"input", i), ("none", 0)
        self.placeholder_of: dict[int, int] = {}  # id(graph input Value) -> its placeholder's index

    def placeholder_type(self, node: Any, index: int) -> TensorType:
        t = tensor_type(node.meta.get("val", node.meta.get("example_value")))
        if t is None and "tensor_meta" in node.meta:
            tm = node.meta["tensor_meta"]
            t = _type(tuple(tm.shape), tm.dtype)
        if t is None and index < len(self.example_inputs):
            t = tensor_type(self.example_inputs[index])
        if t is None:
            raise ImportFail(f"input '{node.name}': not a tensor of known shape and dtype", unsupported=True)
        return t

    def run(self) -> Graph:
        env: dict[Any, Any] = {}
        outputs: list[Any] = []
        n_inputs = 0
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                if n_inputs in self.frozen:
                    env[node] = self.frozen_input(node, n_inputs)
                else:
                    env[node] = self.input(node.name, self.placeholder_type(node, n_inputs))
                    self.placeholder_of[id(env[node])] = n_inputs
                n_inputs += 1
            elif node.op == "get_attr":
                env[node] = self.attribute(node)
            elif node.op == "call_function":
                env[node] = self.call(node, env)
            elif node.op == "call_module" and node.target == "_guards_fn" and not node.users:
                continue  # torch.export's input checks: akg checks the inputs itself
            elif node.op == "output":
                outputs = _flatten(_map_args(node.args[0], env))
            else:  # call_module / call_method: a torch-level graph (to_aten makes an ATen one)
                raise self.unsupported_error(f"{node.op} {node.target}",
                                             f"node '{node.name}': only ATen call_function nodes are "
                                             "converted (trace the module to ATen with to_aten)")
        return self.build(self.graph_outputs(outputs))

    def frozen_input(self, node: Any, index: int) -> Value:
        """Placeholder `index` as a constant of the value it is frozen to (a weight)."""
        want = self.placeholder_type(node, index)
        data = self.frozen[index]
        data = np.array(data.detach().cpu().numpy() if hasattr(data, "detach") else data)  # a copy
        if tuple(data.shape) != tuple(want.shape) or str(data.dtype) != want.dtype:
            raise ImportFail(f"input '{node.name}': frozen to a {data.dtype}{list(data.shape)} value, "
                             f"but the graph takes {want}")
        return self.const(data, node.name)

    def attribute(self, node: Any) -> Any:
        obj = self.gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if not hasattr(obj, "detach"):
            raise ImportFail(f"node '{node.name}': attribute '{node.target}' is not a tensor", unsupported=True)
        if dtype_name(obj.dtype) is None:
            raise ImportFail(f"node '{node.name}': dtype {obj.dtype} is not supported", unsupported=True)
        return self.const(obj.detach().cpu().numpy(), node.name)

    def call(self, node: Any, env: dict) -> Any:
        args = _map_args(list(node.args), env)
        kwargs = _map_args(dict(node.kwargs), env)
        if node.target is operator.getitem:
            item = args[0][args[1]]
            return item
        ctx = FxContext(self, node, args, kwargs)
        for a in _flatten([args, list(kwargs.values())]):
            if isinstance(a, Unavailable):
                raise self.unsupported_error(ctx.op, f"{ctx.where}: uses {a.what}, which akg does not compute")
        result = self.apply(self.mapping(ctx.op, ctx.where), ctx)
        if isinstance(result, tuple):  # say where an item akg does not compute comes from
            return tuple(Unavailable(f"{r.what} of {ctx.where}") if isinstance(r, Unavailable) else r
                         for r in result)
        return Unavailable(f"{result.what}: {ctx.where}") if isinstance(result, Unavailable) else result

    def graph_outputs(self, outputs: list[Any]) -> list[Value]:
        """The graph's outputs, each a node result of its own (an input, a constant or a
        repeated value is copied by a reshape); `output_map` says where each FX output is."""
        inputs = self.placeholder_of
        seen: set[int] = set()
        result: list[Value] = []
        for i, v in enumerate(outputs):
            if v is None:  # a backward graph's gradient of an input that needs none
                self.output_map.append(("none", 0))
                continue
            if isinstance(v, Unavailable) or not isinstance(v, Value):
                what = v.what if isinstance(v, Unavailable) else type(v).__name__
                raise ImportFail(f"output {i} is not a tensor akg computes ({what})", unsupported=True)
            self.output_map.append(("input", inputs[id(v)]) if id(v) in inputs else ("graph", len(result)))
            if id(v) in inputs or id(v) in seen or v in self.constant_values:
                v = self.emit("reshape", [v], f"output_{i}", shape=v.shape)
            seen.add(id(v))
            result.append(v)
        return result


def _type(shape: tuple, dtype: Any) -> TensorType | None:
    name = dtype_name(dtype)
    if name is None or not all(isinstance(d, int) for d in shape):
        return None  # symbolic sizes or a dtype akg has not
    return TensorType(tuple(shape), name)


def tensor_type(val: Any) -> TensorType | None:
    """The TensorType of a (fake) tensor; None for anything else."""
    if val is None or not hasattr(val, "shape") or not hasattr(val, "dtype"):
        return None
    try:
        shape = tuple(int(d) for d in val.shape)
    except (TypeError, ValueError, RuntimeError):  # a symbolic size
        return None
    return _type(shape, val.dtype)


def _map_args(a: Any, env: dict) -> Any:
    if isinstance(a, (list, tuple)):
        return type(a)(_map_args(x, env) for x in a)
    if isinstance(a, dict):
        return {k: _map_args(v, env) for k, v in a.items()}
    if hasattr(a, "op") and hasattr(a, "meta") and a in env:  # an fx.Node
        return env[a]
    if a.__class__.__name__ in ("dtype", "device", "layout", "memory_format"):
        return str(a).removeprefix("torch.")
    return a


def _flatten(a: Any) -> list:
    if isinstance(a, (list, tuple)):
        return [y for x in a for y in _flatten(x)]
    return [a]


def import_fx(gm: Any, example_inputs: Sequence[Any] = (), name: str = "torch",
              frozen: dict[int, Any] | None = None) -> tuple[Graph, list]:
    """The Graph of an ATen-level GraphModule and, per FX output, where it is: ("graph", i), the
    graph's output i, ("input", i), placeholder i returned as it is, or ("none", 0) for None.
    `frozen` maps placeholder indices to values (tensors or arrays) imported as constants
    instead of graph inputs: an inference graph's weights, which akg then folds and lays out
    at compile time. Typed errors (akg.errors) name the node and the op."""
    imp = FxImporter(gm, example_inputs, name, frozen)
    graph = imp.import_graph()
    return graph, imp.output_map


# --- tracing to ATen ----------------------------------------------------------------------------


def decompositions() -> dict:
    """The decomposition table torch applies before akg sees a graph: torch's core-ATen
    decompositions, less those of ops akg maps as a whole (`ATEN_KEPT`)."""
    import torch
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    kept = {getattr(torch.ops.aten, name.split(".")[1]) for name in ATEN_KEPT}
    table = {op: fn for op, fn in table.items() if op.overloadpacket not in kept}
    table[torch.ops.aten._transformer_encoder_layer_fwd.default] = _encoder_layer
    return table


def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
                   norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                   ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """nn.TransformerEncoderLayer's inference fast path (`_transformer_encoder_layer_fwd`) in
    plain ops, for batch-first 3-d inputs without a mask; NotImplemented (torch's own) else."""
    import torch
    import torch.nn.functional as F

    if mask is not None or src.dim() != 3 or src.is_nested:
        return NotImplemented
    b, t, d = src.shape
    heads = num_heads
    hd = d // heads

    def attention(x):
        q, k, v = (y.reshape(b, t, heads, hd).transpose(1, 2) for y in F.linear(x, qkv_weight, qkv_bias).split(d, -1))
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd), dim=-1)
        return F.linear(torch.matmul(att, v).transpose(1, 2).reshape(b, t, d), proj_weight, proj_bias)

    def feed_forward(x):
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    def norm1(x):
        return F.layer_norm(x, (d,), norm_weight_1, norm_bias_1, eps)

    def norm2(x):
        return F.layer_norm(x, (d,), norm_weight_2, norm_bias_2, eps)

    if norm_first:
        x = src + attention(norm1(src))
        return x + feed_forward(norm2(x))
    x = norm1(src + attention(src))
    return norm2(x + feed_forward(x))


# ops the core table would decompose that akg maps directly
ATEN_KEPT = ("aten.nll_loss_forward", "aten.nll_loss_backward")  # mapped whole (torch_aten_grad)


def to_aten(module: Any, example_inputs: Sequence[Any]) -> Any:
    """An ATen-level GraphModule of `module` (an nn.Module, a GraphModule or a function) traced
    on `example_inputs` with `make_fx` and `decompositions()`; the weights are constants."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch.no_grad():
        return make_fx(module, decomposition_table=decompositions(), tracing_mode="real")(*example_inputs)


def convert_torch(obj: Any) -> Graph:
    """The Graph of a TorchModel, a (module, example inputs) pair, or a GraphModule whose
    placeholders carry their types (`meta["val"]`)."""
    if isinstance(obj, tuple):
        obj = TorchModel(*obj)
    if isinstance(obj, TorchModel):
        gm = to_aten(obj.module, obj.example_inputs)
        return import_fx(gm, obj.example_inputs, type(obj.module).__name__)[0]
    if not _is_aten(obj):
        raise ImportFormatError(f"{FILE}: a torch-level GraphModule needs example inputs to be traced "
                                "to ATen: pass (module, example_inputs)")
    return import_fx(obj, (), "torch")[0]


def _is_aten(gm: Any) -> bool:
    return all(n.op in ("placeholder", "get_attr", "output") or
               (n.op == "call_function" and (hasattr(n.target, "overloadpacket") or n.target is operator.getitem))
               for n in gm.graph.nodes)


def _is_torch_module(obj: Any) -> bool:
    for cls in type(obj).__mro__:
        if cls.__module__ == "torch.nn.modules.module" and cls.__name__ == "Module":
            return True
    return False


def accepts_torch(obj: Any) -> bool:
    if isinstance(obj, TorchModel):
        return True
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], (tuple, list)):
        return _is_torch_module(obj[0]) or callable(obj[0]) and "torch" in type(obj[0]).__module__
    return _is_torch_module(obj) and hasattr(obj, "graph") and hasattr(obj.graph, "nodes")


def load_pt2(path: Any) -> Graph:
    """The Graph of a `torch.export.save`d program (`.pt2`), decomposed with `decompositions()`;
    its weights are constants."""
    import torch

    try:
        program = torch.export.load(str(path))
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a bad archive
        raise ImportFormatError(f"{path}: not a torch.export archive ({type(e).__name__}: {e})") from None
    gm = program.run_decompositions(decompositions()).module()
    return import_fx(gm, (), graph_name_of(str(path), FILE, "torch"))[0]


register_frontend(Frontend(
    "torch", (".pt2",), load_pt2, convert_torch,
    accepts=accepts_torch,
    takes="a torch.fx.GraphModule of ATen ops, or (nn.Module, example inputs)"))


from akg.graph.io import torch_aten, torch_aten_grad  # noqa: E402,F401 - fill ATEN_OPS

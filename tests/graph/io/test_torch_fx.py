"""The torch.fx importer (graph/io/torch_fx.py) and the torch.compile backend (akg/dynamo.py):
three small models against eager PyTorch, inference and training, fallbacks, typed errors."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import akg  # noqa: E402
import akg.api  # noqa: E402
from akg.dynamo import STATS, AkgFallbackWarning, akg_backend  # noqa: E402
from akg.errors import UnsupportedOpError  # noqa: E402
from akg.graph.io.torch_fx import import_fx, to_aten  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(64, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


class Encoder(nn.Module):
    """A transformer encoder layer: multi-head self-attention, layer norms, a GELU MLP."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, 32), nn.Linear(32, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = (y.view(b, t, h, d // h).transpose(1, 2) for y in self.qkv(x).split(d, dim=-1))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1) @ v
        x = self.norm1(x + self.proj(att.transpose(1, 2).reshape(b, t, d)))
        return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))


MODELS = {"mlp": (MLP, (4, 8)), "cnn": (CNN, (2, 3, 8, 8)), "transformer": (Encoder, (2, 5, 16))}


def make(name):
    torch.manual_seed(0)
    cls, shape = MODELS[name]
    model = cls()
    if name == "cnn":  # running statistics that are not the defaults
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    return model, torch.randn(shape)


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    STATS.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_inference_matches_eager(name):
    model, x = make(name)
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        compiled = torch.compile(model, backend="akg")  # the entry point
        got = compiled(x)
        want = model(x)
        again = compiled(x + 1)  # a second call gives fresh outputs, the first ones stay
    assert STATS.inference == 1 and STATS.fallbacks == 0, STATS
    (graph,) = STATS.compiled
    assert graph.kind == "inference" and graph.calls and graph.peak_bytes > 0, graph
    assert got.shape == want.shape and got.dtype == torch.float32
    assert rel_err(got, want) <= 1e-5
    with torch.no_grad():
        assert rel_err(again, model(x + 1)) <= 1e-5
        assert rel_err(got, want) <= 1e-5


def test_batch_norm_folds_into_the_conv_as_from_a_model_file():
    """Eval batch norm reaches akg as its `batch_norm` op, not torch's basic ops: its
    expansion folds the statistics and affine weights into one scale and shift per channel,
    so the conv's kernel reads its weight, bias and two vectors (not five), as the same model
    loaded from a file does; the torch.compile door runs that kernel."""
    model, x = make("cnn")
    model.eval()
    with torch.no_grad():
        g, _ = import_fx(to_aten(model, (x,)), (x,), "cnn")
    ops = [n.op for n in g.nodes]
    assert ops.count("batch_norm") == 1 and "rsqrt" not in ops and "sub" not in ops, ops
    conv = next(c for c in akg.api.compile_model(g).calls if "conv2d" in c.name)
    assert len(conv.params) == 4, [p.shape for p in conv.params]  # weight, conv bias, scale, shift
    with torch.no_grad():
        compiled = torch.compile(model, backend="akg")
        assert rel_err(compiled(x), model(x)) <= 1e-5
    assert conv.kernel in STATS.compiled[0].calls


def train(model, step_fn, x, target, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(step_fn(x), target)
        loss.backward()
        losses.append(loss.item())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return losses, grads


def check_training(name, backend):
    model, x = make(name)
    if name == "cnn":
        model.eval()  # batch norm on its running statistics
    reference = copy.deepcopy(model)
    target = torch.randn(model(x).shape)
    want_losses, want_grads = train(reference, reference, x, target)
    got_losses, got_grads = train(model, torch.compile(model, backend=backend), x, target)
    assert rel_err(got_losses, want_losses) <= 1e-4
    for got, want in zip(got_grads, want_grads):
        for g, w in zip(got, want):
            assert rel_err(g, w) <= 1e-4
    for p, q in zip(model.parameters(), reference.parameters()):
        assert rel_err(p.detach(), q.detach()) <= 1e-4
    assert want_losses[-1] < want_losses[0]  # it did train


WEIGHT_CHANGES = {  # each way a frozen weight changes makes the graph thaw once
    "written in place": lambda m: m.conv.weight.mul_(-2),  # as an optimizer step writes it
    "new storage, same version": lambda m: setattr(m.conv.weight, "data", -m.conv.weight.detach().clone()),
    "replaced": lambda m: setattr(m.fc, "weight", nn.Parameter(torch.ones_like(m.fc.weight))),
}


@pytest.mark.parametrize("change", WEIGHT_CHANGES)
def test_inference_compiles_the_weights_in_and_thaws_when_they_change(change):
    model, x = make("cnn")
    model.eval()
    compiled = torch.compile(model, backend="akg")
    with torch.no_grad():
        assert rel_err(compiled(x), model(x)) <= 1e-5
        assert rel_err(compiled(x * 2), model(x * 2)) <= 1e-5  # a new input is no reason to thaw
        assert STATS.frozen == 8 and STATS.thawed == 0, STATS  # conv, bn (4), fc
        WEIGHT_CHANGES[change](model)
        assert rel_err(compiled(x), model(x)) <= 1e-5
        assert rel_err(compiled(x * 3), model(x * 3)) <= 1e-5  # and later calls too
    assert STATS.thawed == 1, STATS


def test_inference_freezes_tensors_a_function_reads_from_its_closure():
    torch.manual_seed(0)
    w = torch.randn(8, 4)

    def fn(x, bias):
        return torch.relu(x @ w) + bias

    compiled = torch.compile(fn, backend="akg")
    x, bias = torch.randn(3, 8), torch.randn(4)
    with torch.no_grad():
        assert rel_err(compiled(x, bias), fn(x, bias)) <= 1e-5
        assert rel_err(compiled(x + 1, bias * 3), fn(x + 1, bias * 3)) <= 1e-5
    assert STATS.frozen == 1 and STATS.thawed == 0, STATS  # w; x and bias are arguments


def test_training_mlp_compiles_forward_and_backward():
    with warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        check_training("mlp", akg.torch_backend)  # the backend as a callable
    assert STATS.forward == 1 and STATS.backward == 1 and STATS.fallbacks == 0, STATS


@pytest.mark.slow  # about a minute: some 40 kernels for the forward and backward graphs
def test_training_transformer_compiles_forward_and_backward():
    with warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        check_training("transformer", "akg")
    assert STATS.forward >= 1 and STATS.backward >= 1 and STATS.fallbacks == 0, STATS


def test_training_cnn_compiles_forward_and_backward():
    # the forward returns the max pool's indices (saved for the backward), the backward has
    # convolution_backward and max_pool2d_with_indices_backward
    with warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        check_training("cnn", akg_backend)
    assert STATS.forward == 1 and STATS.backward == 1 and STATS.fallbacks == 0, STATS


class PoolWithIndices(nn.Module):
    def forward(self, x):
        return F.max_pool2d(F.relu(x), 3, stride=2, padding=1, return_indices=True)


def test_max_pool_indices_are_torchs_also_with_ties():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 7, 7)
    x[0, 0] = 0.0  # whole windows of equal values: the first one in scan order wins
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        got_values, got_indices = torch.compile(PoolWithIndices(), backend="akg")(x)
        want_values, want_indices = PoolWithIndices()(x)
    assert STATS.inference == 1
    assert torch.equal(got_values, want_values)
    assert got_indices.dtype == torch.int64 and torch.equal(got_indices, want_indices)


@pytest.mark.parametrize("name", list(MODELS))
def test_no_graph_breaks(name):
    model, x = make(name)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


class Cumsum(nn.Module):
    def forward(self, x):
        return torch.cumsum(torch.relu(x), dim=1) * 2


def test_unsupported_op_falls_back_with_its_name():
    x = torch.randn(3, 4)
    with pytest.warns(AkgFallbackWarning, match=r"aten\.cumsum"):
        got = torch.compile(Cumsum(), backend="akg")(x)
    assert torch.equal(got, Cumsum()(x))
    assert STATS.fallbacks == 1 and STATS.inference == 0


class LinearCumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cumsum(self.fc(x), dim=1)


def test_training_with_an_unsupported_op_falls_back():
    torch.manual_seed(0)
    model, x, target = LinearCumsum(), torch.randn(3, 4), torch.randn(3, 4)
    reference = copy.deepcopy(model)
    want_losses, want_grads = train(reference, reference, x, target)
    with pytest.warns(AkgFallbackWarning, match=r"forward graph runs eagerly.*aten\.cumsum"):
        got_losses, got_grads = train(model, torch.compile(model, backend="akg"), x, target)
    assert rel_err(got_losses, want_losses) <= 1e-4
    for got, want in zip(got_grads, want_grads):
        for g, w in zip(got, want):
            assert rel_err(g, w) <= 1e-4
    assert STATS.forward == 0 and STATS.fallbacks >= 1


class AroundCumsum(nn.Module):
    """Two runs of mapped ops around an unmapped one."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.b(torch.relu(torch.cumsum(torch.relu(self.a(x)) * 2, dim=1)))


def test_a_graph_with_an_unmapped_op_runs_partitioned():
    torch.manual_seed(0)
    model, x = AroundCumsum(), torch.randn(3, 4)
    with torch.no_grad(), pytest.warns(AkgFallbackWarning, match=r"but for the parts akg maps.*aten\.cumsum"):
        got = torch.compile(model, backend="akg")(x)
        want = model(x)
    assert STATS.fallbacks == 1 and STATS.inference == 0
    assert STATS.partitions == 2  # the linear + relu + mul before, the relu + linear after
    assert rel_err(got, want) <= 1e-5


def test_unsupported_op_is_a_typed_error_naming_node_and_op():
    gm = to_aten(Cumsum(), (torch.randn(3, 4),))
    with pytest.raises(UnsupportedOpError, match=r"aten\.cumsum.*node 'cumsum'"):
        import_fx(gm)


def test_akg_compile_takes_a_module_with_example_inputs():
    model, x = make("cnn")
    model.eval()
    compiled = akg.compile(model, target="cpu", example_inputs=(x,))
    (got,) = compiled(x.numpy())
    with torch.no_grad():
        assert rel_err(got, model(x)) <= 1e-5


def test_akg_compile_takes_an_aten_graph_module():
    model, x = make("mlp")
    gm = to_aten(model, (x,))
    graph, where = import_fx(gm)
    assert where == [("graph", 0)]
    assert [v.type.shape for v in graph.inputs] == [(4, 8)]
    assert {n.op for n in graph.nodes} >= {"matmul", "relu", "add"}
    (got,) = akg.compile(gm)(x.numpy())
    with torch.no_grad():
        assert rel_err(got, model(x)) <= 1e-5


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_along_a_dim(dim):
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    index = torch.randint(0, 4 if dim == 0 else 5, (3, 2))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        got = torch.compile(lambda a, i: torch.gather(a, dim, i) * 2, backend="akg")(x, index)
    assert torch.equal(got, torch.gather(x, dim, index) * 2)


@pytest.mark.parametrize("fn", [F.relu6, lambda a: F.hardtanh(a, -0.5, 2.0), lambda a: a.clamp(min=-0.3),
                                lambda a: a.clamp(max=0.2), lambda a: torch.clamp(a, -1, 1) * 2],
                         ids=["relu6", "hardtanh", "clamp_min", "clamp_max", "clamp"])
def test_clamps_compile_whole(fn):
    # MobileNetV2's ReLU6 reaches the backend as aten.hardtanh(x, 0, 6)
    torch.manual_seed(0)
    x = torch.randn(4, 37) * 4
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        got = torch.compile(fn, backend="akg")(x)
    assert STATS.fallbacks == 0, STATS
    assert torch.equal(got, fn(x))


def test_cross_entropy_loss_compiles_whole():
    torch.manual_seed(0)
    logits, labels = torch.randn(8, 10), torch.randint(0, 10, (8,))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        got = torch.compile(lambda x, y: F.cross_entropy(x, y), backend="akg")(logits, labels)
    assert STATS.inference == 1 and STATS.fallbacks == 0, STATS
    assert rel_err(got, F.cross_entropy(logits, labels)) <= 1e-5


def test_a_frozen_value_of_another_type_is_an_error():
    from akg.errors import ImportFormatError

    gm = to_aten(lambda x, w: torch.mm(x, w), (torch.ones(2, 3), torch.ones(3, 4)))
    graph, _ = import_fx(gm, frozen={1: np.ones((3, 4), np.float32)})
    assert len(graph.inputs) == 1 and len(graph.constants) == 1  # w is a constant, x the input
    with pytest.raises(ImportFormatError, match=r"frozen to a float32\[4, 3\] value"):
        import_fx(gm, frozen={1: np.ones((4, 3), np.float32)})


def test_outputs_that_are_inputs():
    gm = to_aten(lambda x, y: (x, torch.mul(y, 2)), (torch.ones(2), torch.ones(3)))
    graph, where = import_fx(gm)
    assert where == [("input", 0), ("graph", 1)]


def test_a_result_torch_disagrees_with_is_an_error():
    from akg.errors import ImportFormatError
    from akg.graph.io.importer import OpMapping
    from akg.graph.io.torch_fx import ATEN_OPS

    model, x = make("mlp")
    gm = to_aten(model, (x,))
    right = ATEN_OPS.get("aten.relu")
    # a wrong mapping (a sum over axis 1) gives [4] where torch recorded [4, 16]: caught
    ATEN_OPS.register("aten.relu", OpMapping("aten.relu", "sum", lambda ctx: ctx.emit("sum", [ctx.args[0]], axes=[1])),
                      replace=True)
    try:
        with pytest.raises(ImportFormatError, match="torch recorded"):
            import_fx(gm)
    finally:
        ATEN_OPS.register("aten.relu", right, replace=True)


def test_load_a_torch_export_archive(tmp_path):
    model, x = make("mlp")
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    graph = akg.api.load(path)
    assert graph.name == "mlp" and [v.type.shape for v in graph.inputs] == [(4, 8)]
    (got,) = akg.run(path, [x.numpy()])
    with torch.no_grad():
        assert rel_err(got, model(x)) <= 1e-5


def test_the_aten_table_is_a_registry_of_named_mappings():
    from akg.graph.io.torch_fx import ATEN_OPS

    assert len(ATEN_OPS) >= 80
    for name, mapping in ATEN_OPS.items():
        assert name.startswith("aten.") and mapping.name == name and mapping.ops
    for name in ("aten.convolution_backward", "aten.max_pool2d_with_indices_backward", "aten.native_layer_norm"):
        assert name in ATEN_OPS


def test_the_backend_is_found_by_name():
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("akg") is akg_backend


def test_new_shapes_recompile_with_dynamic_false_and_stay_exact():
    model, _ = make("mlp")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        compiled = torch.compile(model, backend="akg", dynamic=False)
        for n in (4, 6):
            x = torch.randn(n, 8)
            assert rel_err(compiled(x), model(x)) <= 1e-5
    assert STATS.inference == 2 and STATS.fallbacks == 0


def test_symbolic_shapes_fall_back_and_stay_exact():
    model, _ = make("mlp")
    compiled = torch.compile(model, backend="akg", dynamic=True)
    x = torch.randn(5, 8)
    with torch.no_grad(), pytest.warns(AkgFallbackWarning, match="not a tensor of known shape"):
        got = compiled(x)
        want = model(x)
    assert rel_err(got, want) <= 1e-5
    assert STATS.fallbacks == 1 and STATS.inference == 0


@pytest.mark.slow  # about 30 s a variant
@pytest.mark.parametrize("norm_first, activation", [(False, "gelu"), (True, "relu")])
def test_torch_transformer_encoder_layer_fast_path(norm_first, activation):
    # in eval mode under no_grad, nn.TransformerEncoderLayer calls the fused
    # aten._transformer_encoder_layer_fwd, which decompositions() spells out in plain ops
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", AkgFallbackWarning)
        got = torch.compile(layer, backend="akg")(x)
        want = layer(x)
    assert STATS.inference == 1 and STATS.fallbacks == 0
    assert rel_err(got, want) <= 1e-5
    assert torch._dynamo.explain(layer)(x).graph_break_count == 0

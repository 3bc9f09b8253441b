"""The auto-parallel cost model: collective formulas, intra/inter-node links, resharding as the
sum of its steps, roofline compute per shard, training-step roles and per-device memory, and
a plan priced by evaluate."""

import pytest

from akg.errors import InputError
from akg.graph.builder import GraphBuilder
from akg.graph.parallel import cost
from akg.graph.parallel.cost import ClusterSpec, StepRoles, collective_time, compute_time, evaluate
from akg.graph.parallel.gpt import step_of_inputs
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import uniform_plan
from akg.graph.parallel.reshard import reshard
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.strategy import OpCall, strategies
from akg.graph.types import TensorType

C = ClusterSpec("test", peak_flops=1e12, mem_bandwidth=1e11, memory=1 << 30, devices_per_node=4,
                intra_alpha=1e-6, intra_beta=1e-10, inter_alpha=1e-5, inter_beta=1e-9)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_collective_formulas(n):
    B = 1 << 20
    for intra, (a, b) in ((True, (1e-6, 1e-10)), (False, (1e-5, 1e-9))):
        assert collective_time("all_reduce", B, n, C, intra) == pytest.approx(a + b * 2 * (n - 1) / n * B)
        for op in ("all_gather", "reduce_scatter", "all_to_all"):
            assert collective_time(op, B, n, C, intra) == pytest.approx(a + b * (n - 1) / n * B)
        assert collective_time("send_recv", B, 2, C, intra) == pytest.approx(a + b * B)
    assert collective_time("all_reduce", B, 1, C, True) == 0.0  # one device: nothing moves
    assert collective_time("shard_slice", B, n, C, False) == 0.0


GLOO = ClusterSpec("gloo", 1e12, 1e11, 1 << 30, 4, 1e-3, 1e-9, 1e-3, 1e-9, library="gloo", message_alpha=1e-4,
                   p2p_alpha=3e-5)


@pytest.mark.parametrize("n", [2, 4])
def test_gloo_prices_messages_and_its_stand_ins(n):
    """As gloo runs them: alpha per call and per ring message, a reduce-scatter is an
    all-reduce of the whole buffer, an all-to-all a gather of every rank's whole buffer, a
    send its own latency."""
    B, a, h, b = 1 << 20, 1e-3, 1e-4, 1e-9
    ar = collective_time("all_reduce", B, n, GLOO, True)
    assert ar == pytest.approx(a + h * 2 * (n - 1) + b * 2 * (n - 1) / n * B)
    assert collective_time("reduce_scatter", B, n, GLOO, True) == ar
    ag = collective_time("all_gather", B, n, GLOO, True)
    assert ag == pytest.approx(a + h * (n - 1) + b * (n - 1) / n * B)
    assert collective_time("all_to_all", B, n, GLOO, True) == collective_time("all_gather", n * B, n, GLOO, True)
    assert collective_time("send_recv", B, 2, GLOO, True) == pytest.approx(3e-5 + b * B)  # its own latency
    # NCCL's natives with a message latency: the formulas plus the ring's messages
    from dataclasses import replace

    ring = replace(GLOO, library="nccl", p2p_alpha=None)
    assert collective_time("reduce_scatter", B, n, ring, True) == pytest.approx(ag) and ag < ar
    assert collective_time("send_recv", B, 2, ring, True) == pytest.approx(a + h + b * B)
    with pytest.raises(InputError, match="collective library 'mpi'"):
        ClusterSpec("x", 1, 1, 1, library="mpi")


def test_rate_curves_and_the_cost_of_a_call():
    """Measured rate curves: a kernel achieves the rate of its size (interpolated in log-log,
    ends held); a kernel of its own pays `call_s`, an elementwise op fuses and does not."""
    from dataclasses import replace

    c = replace(C, flops_curve=((1e6, 1e10), (1e8, 1e11)), bandwidth_curve=((1e4, 1e9), (1e6, 1e10)), call_s=1e-5)
    assert c.flop_rate(1e5) == 1e10 and c.flop_rate(1e9) == 1e11 and c.flop_rate(1e7) == pytest.approx(10 ** 10.5)
    assert c.byte_rate(1e5) == pytest.approx(10 ** 9.5) and C.byte_rate(1.0) == C.mem_bandwidth
    mesh = Mesh.parse("tp=2")
    t = TensorType((64, 64), "float32")
    mm = OpCall("matmul", (t, t), (t,), _attrs("matmul"))
    add = OpCall("add", (t, t), (t,), _attrs("add"))
    rep = lambda call: next(s for s in strategies(call, mesh) if s.name == "replicated")  # noqa: E731
    f, nb = 2 * 64 ** 3, 3 * 64 * 64 * 4
    assert compute_time(mm, rep(mm), mesh, c) == pytest.approx(max(f / c.flop_rate(f), nb / c.byte_rate(nb)) + 1e-5)
    assert compute_time(add, rep(add), mesh, c) == pytest.approx(nb / c.byte_rate(nb))
    assert cost.starts_kernel("matmul") and cost.starts_kernel("sum") and not cost.starts_kernel("add")
    assert not cost.starts_kernel("reshape") and not cost.starts_kernel("all_reduce")


def test_fused_traffic_counts_what_crosses_memory():
    """x -> matmul -> add(bias) -> relu -> matmul: the add reads the bias (an input) but not the
    matmul's output (fused), writes nothing that only relu reads; relu writes for the matmul."""
    b = GraphBuilder("f")
    x, w, bias, w2 = b.input("x", (32, 64)), b.input("w", (64, 64)), b.input("bias", (64,)), b.input("w2", (64, 8))
    h = b.op("add", b.op("matmul", x, w, name="mm"), bias, name="h")
    r = b.op("relu", h, name="r")
    b.output(b.op("matmul", r, w2, name="out"), b.op("neg", r, name="n"))
    g = b.build()
    moves = cost.fused_traffic(g)
    by = {n.outputs[0].name: moves.get(id(n)) for n in g.nodes}
    assert by["mm"] is None and by["out"] is None  # kernels of their own: every operand
    assert by["h"] == ((False, True), (False,)) and by["r"] == ((False,), (True,)) and by["n"] == ((False,), (True,))
    mesh = Mesh.parse("tp=2")
    node = next(n for n in g.nodes if n.outputs[0].name == "h")
    call = OpCall.of(node)
    s = next(s for s in strategies(call, mesh) if s.name == "replicated")
    assert compute_time(call, s, mesh, C, moves=by["h"]) == pytest.approx(64 * 4 / 1e11)  # the bias only
    assert compute_time(call, s, mesh, C) == pytest.approx((2 * 32 * 64 + 64) * 4 / 1e11)


def test_busy_factor_on_shared_cores():
    """Processes sharing cores: one microbatch through two stages keeps half the devices busy,
    so a stage computes as fast as with half of them; not so with own cores, one stage, or
    enough microbatches to fill the pipeline."""
    from dataclasses import replace

    host = replace(C, shared_cores=2)
    assert cost.busy_factor(host, 4, 2, 1) == 0.5 and cost.busy_factor(host, 8, 4, 1) == 0.25
    assert cost.busy_factor(host, 4, 2, 2) == 1.0 and cost.busy_factor(host, 2, 2, 1) == 1.0  # not oversubscribed
    assert cost.busy_factor(C, 4, 2, 1) == 1.0 and cost.busy_factor(host, 4, 1, 1) == 1.0


def test_intra_and_inter_node_axes():
    """tp innermost inside a node of 4: intra; dp across nodes: inter."""
    mesh = Mesh.parse("dp=2,tp=4", devices_per_node=4)
    t = TensorType((64, 256), "float32")
    part = Sharding(((), ()), ("tp",))
    (tp_step,) = reshard(part, Sharding.replicated(2), t.shape, mesh)
    assert cost.step_time(tp_step, t, mesh, C) == pytest.approx(1e-6 + 1e-10 * 2 * 3 / 4 * t.nbytes)
    part = Sharding(((), ()), ("dp",))
    (dp_step,) = reshard(part, Sharding.replicated(2), t.shape, mesh)
    assert cost.step_time(dp_step, t, mesh, C) == pytest.approx(1e-5 + 1e-9 * 2 * 1 / 2 * t.nbytes)


def test_resharding_costs_the_sum_of_its_steps():
    mesh = Mesh.parse("dp=2,tp=2", devices_per_node=4)
    t = TensorType((32, 64), "float32")
    src = Sharding((("dp",), ()), ("tp",))
    dst = Sharding(((), ("dp",)))
    steps = reshard(src, dst, t.shape, mesh)
    assert [s.op for s in steps] == ["all_reduce", "all_to_all"]
    want = sum(cost.step_time(s, t, mesh, C) for s in steps)
    assert cost.reshard_time(src, dst, t, mesh, C) == pytest.approx(want) and want > 0
    assert cost.reshard_time(dst, dst, t, mesh, C) == 0.0


def test_roofline_compute_per_shard():
    mesh = Mesh.parse("tp=4")
    call = OpCall("matmul", (TensorType((512, 1024), "float32"), TensorType((1024, 2048), "float32")),
                  (TensorType((512, 2048), "float32"),), _attrs("matmul"))
    options = {s.name: s for s in strategies(call, mesh)}
    whole = compute_time(call, options["replicated"], mesh, C)
    assert whole == pytest.approx(max(2 * 512 * 1024 * 2048 / 1e12, 4 * (512 * 1024 + 1024 * 2048 + 512 * 2048) / 1e11))
    for name in ("m(tp)", "n(tp)", "k(tp)"):
        assert compute_time(call, options[name], mesh, C) == pytest.approx(whole / 4, rel=0.35)
    # a memory-bound op is priced by its bytes
    add = OpCall("add", (TensorType((1 << 20,), "float32"),) * 2, (TensorType((1 << 20,), "float32"),), _attrs("add"))
    rep = strategies(add, mesh)[0]
    assert compute_time(add, rep, mesh, C) == pytest.approx(3 * 4 * (1 << 20) / 1e11)


def test_tuned_kernel_times_replace_the_roofline():
    class Fixed:
        def time(self, call):
            return 1.25 if call.op == "matmul" else None

    mesh = Mesh.parse("tp=2")
    call = OpCall("matmul", (TensorType((8, 8), "float32"),) * 2, (TensorType((8, 8), "float32"),), _attrs("matmul"))
    assert compute_time(call, strategies(call, mesh)[1], mesh, C, Fixed()) == 1.25


def test_presets_and_parsing():
    a = cost.cluster("a100")
    assert a.peak_flops == 312e12 and a.devices_per_node == 8
    slow = cost.cluster("a100@25")
    assert slow.inter_beta == pytest.approx(8 / 25e9) and slow.intra_beta == a.intra_beta
    h = cost.host()
    assert h.peak_flops > 1e6 and h.mem_bandwidth > 1e6 and "measured" in h.note
    assert h.library == "gloo" and a.library == "nccl" and h.call_s > 0 == a.call_s
    with pytest.raises(InputError, match="known: a100"):
        cost.cluster("tpu")
    with pytest.raises(InputError, match="bad network"):
        cost.cluster("a100@fast")


def _mlp_step():
    b = GraphBuilder("mlp")
    x = b.input("x", (64, 128))
    w1 = b.input("w1", (128, 256))
    w2 = b.input("w2", (256, 128))
    y = b.op("matmul", b.op("relu", b.op("matmul", x, w1, name="h"), name="a"), w2, name="y")
    b.output(b.op("mean", b.op("mul", y, y, name="sq"), name="loss"))
    return step_of_inputs(b.build(), "loss", ["w1", "w2"], "sgd")


def test_step_roles_and_memory():
    g = _mlp_step()
    roles = StepRoles.of(g)
    fwd = {n.outputs[0].name for n in g.nodes if id(n) in roles.forward}
    assert {"h", "a", "y", "sq", "loss"} <= fwd
    assert {n.outputs[0].name for n in g.nodes if roles.per_step(n)} >= {"new.w1", "new.w2"}
    assert {"a", "y"} <= roles.kept  # the backward pass reads them
    assert roles.waiting == {"grad.w1", "grad.w2"}
    mesh = Mesh.parse("tp=2")
    plan = uniform_plan(g, mesh, lambda n, options: None)  # everything replicated
    p = evaluate(g, plan, C)
    params = 4 * (64 * 128 + 128 * 256 + 256 * 128)
    assert p.memory_parts["inputs"] >= params
    assert p.memory_parts["gradients"] == 4 * 2 * 128 * 256
    assert p.communication == 0.0
    # the same plan with the weights split in half holds half of them
    half = uniform_plan(g, mesh, lambda n, options: None,
                        inputs={"w1": Sharding(((), ("tp",))), "w2": Sharding((("tp",), ()))})
    q = evaluate(g, half, C)
    assert q.memory_parts["inputs"] == p.memory_parts["inputs"] - 4 * (128 * 256 + 256 * 128) // 2
    assert q.communication > 0  # gathered where replicated ops read them, new.w* sliced back


def test_a_value_read_alike_twice_is_resharded_once():
    g = _mlp_step()
    mesh = Mesh.parse("tp=4")

    def pick(node, options):
        if node.outputs[0].name == "y":
            return next(s for s in options if s.name == "k(tp)")
        return None

    plan = uniform_plan(g, mesh, pick, inputs={"w1": Sharding(((), ("tp",))), "w2": Sharding((("tp",), ()))})
    p = evaluate(g, plan, C)
    y_reduces = [c for cs in p.collectives.values() for c in cs if c.value == "y" and c.step.op == "all_reduce"]
    assert len(y_reduces) == 1  # sq reads y twice and the backward once more: one all-reduce


def test_pipeline_time_is_1f1b():
    assert cost.pipeline_time([1.0, 2.0, 1.5], [0.1, 0.3, 0.2], 8) == pytest.approx(4.5 + 7 * 2.0 + 0.3)
    assert [cost.in_flight(s, 4, 8) for s in range(4)] == [4, 3, 2, 1]
    assert cost.in_flight(0, 4, 2) == 2


def _attrs(op):
    from akg.graph.ops import get_op

    return get_op(op).check_attrs({})


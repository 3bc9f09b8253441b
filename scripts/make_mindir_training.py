"""Write the MindIR training-step fixtures (tests/fixtures/mindir/train_*.mindir + .io.npz) with
real MindSpore: an MLP classifier (Dense 16->32, ReLU, Dense 32->4, sparse softmax cross entropy,
mean) in nn.WithLossCell + nn.TrainOneStepCell with nn.SGD (plain; momentum 0.9 + nesterov + weight decay 0.01), nn.Momentum (0.9) and nn.Adam
(train_adam: one-hot float labels, so dense SoftmaxCrossEntropyWithLogits + ReduceMean);
the optimizer state starts random (as mid-training), not at its zero start.

Run with a throwaway MindSpore (never a dependency of akg):
    python3 -m venv /tmp/msenv && /tmp/msenv/bin/pip install mindspore==2.10.0 numpy
    /tmp/msenv/bin/python scripts/make_mindir_training.py [OUT_DIR]

Each `<name>.io.npz` follows the shared MindIR corpus: `input_0, input_1` are the graph inputs
(data float32[8,16], labels int32[8] or one-hot float32[8,4]), `output_0` the loss MindSpore computed for the step; and
for every parameter P, `init.P` (its value before the step, the one stored in the file) and
`new.P` (its value after MindSpore ran the same step once), plus `new.<slot>` for optimizer
state such as `moments.fc1.weight`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import mindspore as ms
from mindspore import Tensor, nn


class Mlp(nn.Cell):
    def __init__(self, rng: np.random.Generator):
        super().__init__()
        self.fc1 = nn.Dense(16, 32, weight_init=Tensor(rng.normal(0, 0.3, (32, 16)).astype(np.float32)),
                            bias_init=Tensor(rng.normal(0, 0.1, (32,)).astype(np.float32)))
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 4, weight_init=Tensor(rng.normal(0, 0.3, (4, 32)).astype(np.float32)),
                            bias_init=Tensor(rng.normal(0, 0.1, (4,)).astype(np.float32)))

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def make(name: str, out: Path) -> None:
    rng = np.random.default_rng(17)
    net = Mlp(rng)
    dense = name == "train_adam"  # one-hot float labels: SoftmaxCrossEntropyWithLogits + ReduceMean
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=not dense, reduction="mean")
    if name == "train_adam":
        opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    elif name == "train_momentum":
        opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    elif name == "train_sgd_nesterov":
        opt = nn.SGD(net.trainable_params(), learning_rate=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    else:
        opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    step.set_train()
    # optimizer state mid-training (not its zero start), so that every term of the update counts:
    # random moments / accumulations, and SGD's `stat` (1 before a parameter's first step) mixed
    for p in step.get_parameters():
        if p.name.startswith(("moments.", "accum.")):
            p.set_data(Tensor(rng.normal(0, 0.1, p.shape).astype(np.float32)))
        elif p.name.startswith("stat."):
            p.set_data(Tensor((rng.random(p.shape) < 0.3).astype(np.float32)))
        elif p.name.startswith("moment1."):
            p.set_data(Tensor(rng.normal(0, 0.1, p.shape).astype(np.float32)))
        elif p.name.startswith("moment2."):
            p.set_data(Tensor(rng.uniform(0, 0.01, p.shape).astype(np.float32)))
        elif p.name in ("beta1_power", "beta2_power"):  # after 3 steps
            p.set_data(Tensor(np.float32((0.9 if p.name == "beta1_power" else 0.999) ** 3)))
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.integers(0, 4, (8,)).astype(np.int32)
    if dense:
        y = np.eye(4, dtype=np.float32)[y]
    ms.export(step, Tensor(x), Tensor(y), file_name=str(out / name), file_format="MINDIR")
    params = {p.name: p.asnumpy().copy() for p in step.get_parameters()}
    loss = step(Tensor(x), Tensor(y)).asnumpy()
    after = {p.name: p.asnumpy().copy() for p in step.get_parameters()}
    arrays = {"input_0": x, "input_1": y, "output_0": np.asarray(loss, np.float32)}
    for k, v in params.items():
        arrays[f"init.{k}"] = v
        arrays[f"new.{k}"] = after[k]
    np.savez(out / f"{name}.io.npz", **arrays)
    print(name, "loss", float(loss), "parameters", sorted(params))


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "tests/fixtures/mindir"
    out.mkdir(parents=True, exist_ok=True)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(17)
    for name in ("train_sgd", "train_momentum", "train_sgd_nesterov", "train_adam"):
        make(name, out)


if __name__ == "__main__":
    main()

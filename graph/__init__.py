"""akg.graph: the graph IR, the op registry, the `.mir` format, the reference interpreter and
autodiff (gradients and training steps)."""

from akg.graph.types import TensorType, broadcast_shapes  # noqa: F401
from akg.graph.ops import OPS, Attr, OpDef, get_op  # noqa: F401
from akg.graph.ir import Graph, Node, Value  # noqa: F401
from akg.graph.builder import GraphBuilder  # noqa: F401
from akg.graph.interpreter import evaluate, random_inputs  # noqa: F401
from akg.graph.io import emit_mir, load_mir, parse_mir, save_mir  # noqa: F401
from akg.graph.autodiff import grad, value_and_grad  # noqa: F401
from akg.graph.train import train_step  # noqa: F401

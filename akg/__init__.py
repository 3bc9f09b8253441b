"""akg: an automatic operator generator and kernel autotuner.

Heavy modules (TVM, isl) load on first use: `import akg` stays fast for the CLI.
"""

from akg._version import __version__  # noqa: F401
from akg.errors import AkgError  # noqa: F401


def build(subgraph, target="cpu", config=None, db=None):
    """Compile one subgraph into a Kernel (see akg.api.build)."""
    from akg.api import build as _build

    return _build(subgraph, target, config, db)


def compile(model, target="cpu", db=None, progress=None, example_inputs=None):  # noqa: A001 - the public name
    """Compile a model into a CompiledModel: a path of any known format (.onnx, .mir, .mindir,
    composite JSON), a Graph, an onnx.ModelProto, or a torch.nn.Module with `example_inputs`
    (see akg.api.compile).

        compiled = akg.compile("model.onnx", target="cpu")
        outputs = compiled(x=np.ones((1, 3, 224, 224), np.float32))
    """
    from akg.api import compile as _compile

    return _compile(model, target, db, progress, example_inputs)


def torch_backend(gm, example_inputs):
    """The torch.compile backend, as a callable: `torch.compile(model, backend=akg.torch_backend)`
    is `backend="akg"` (see akg.dynamo and docs/torch.md)."""
    from akg.dynamo import akg_backend

    return akg_backend(gm, example_inputs)


def run(model, inputs=None, target="cpu", db=None):
    """Compile a model (as akg.compile takes it) and run it once on `inputs` (a mapping of input
    name -> array, or the arrays in input order); the outputs, in order (see akg.api.run)."""
    from akg.api import run as _run

    return _run(model, inputs, target, db)


def compile_model(graph, target="cpu", db=None, progress=None):
    """Compile a whole model into a CompiledModel (see akg.api.compile_model)."""
    from akg.api import compile_model as _compile_model

    return _compile_model(graph, target, db, progress)


def tune(model, target="cpu", trials=64, db=None, **options):
    """Tune a model's kernels (a path of any known format, a Graph or an onnx.ModelProto),
    recording every measurement in the database (see akg.tuner.tune)."""
    from akg.api import tune as _tune

    return _tune(model, target=target, trials=trials, db=db, **options)

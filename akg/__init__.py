"""akg: an automatic operator generator and kernel autotuner.

Heavy modules (TVM, isl) load on first use: `import akg` stays fast for the CLI.
"""

from akg._version import __version__  # noqa: F401
from akg.errors import AkgError  # noqa: F401


def build(subgraph, target="cpu", config=None, db=None):
    """Compile one subgraph into a Kernel (see akg.api.build)."""
    from akg.api import build as _build

    return _build(subgraph, target, config, db)


def compile_model(graph, target="cpu", db=None, progress=None):
    """Compile a whole model into a CompiledModel (see akg.api.compile_model)."""
    from akg.api import compile_model as _compile_model

    return _compile_model(graph, target, db, progress)


def tune(model, target="cpu", trials=64, db=None, **options):
    """Tune a model's kernels, recording every measurement in the database (see akg.tuner.tune)."""
    from akg.api import tune as _tune

    return _tune(model, target=target, trials=trials, db=db, **options)

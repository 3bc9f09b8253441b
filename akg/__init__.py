"""akg: an automatic operator generator and kernel autotuner.

Heavy modules (TVM, isl) load on first use: `import akg` stays fast for the CLI.
"""

from akg._version import __version__  # noqa: F401
from akg.errors import AkgError  # noqa: F401


def build(subgraph, target="cpu", config=None):
    """Compile one subgraph into a Kernel (see akg.build.build)."""
    from akg.compiler import build as _build

    return _build(subgraph, target, config)

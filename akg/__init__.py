"""akg: an automatic operator generator and kernel autotuner."""

from akg._version import __version__  # noqa: F401
from akg.errors import AkgError  # noqa: F401

"""Model formats in and out of the graph IR (`.mir` text; importers of other formats)."""

from __future__ import annotations

from pathlib import Path

from akg.errors import ImportFormatError
from akg.graph.io.mir import emit_mir, load_mir, parse_mir, save_mir  # noqa: F401
from akg.graph.io.akg_json import load_akg_json, parse_akg_json  # noqa: F401
from akg.graph.io.mindir import load_mindir, parse_mindir  # noqa: F401

# suffix -> loader; importers of other formats register here as they land
LOADERS = {".mir": load_mir, ".info": load_akg_json, ".json": load_akg_json, ".mindir": load_mindir}


def load_model(path: str | Path):
    """Load a model file into a Graph, choosing the reader by file suffix."""
    path = Path(path)
    loader = LOADERS.get(path.suffix.lower())
    if loader is None:
        raise ImportFormatError(
            f"{path}: unknown model format '{path.suffix}' (known: {', '.join(sorted(LOADERS))})"
        )
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file")
    return loader(path)

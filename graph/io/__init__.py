"""Model formats in and out of the graph IR (`.mir` text; importers of other formats), and
`load_model`, the one door in: a file by its suffix, or an in-memory model by its type."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from akg.errors import ImportFormatError
from akg.graph.io.importer import FRONTENDS, Frontend, SuffixTable, frontend_for, frontend_for_suffix  # noqa: F401
from akg.graph.io.mir import emit_mir, load_mir, parse_mir, save_mir  # noqa: F401
from akg.graph.io.akg_json import load_akg_json, loads_akg_json, parse_akg_json  # noqa: F401
from akg.graph.io.mindir import load_mindir, parse_mindir  # noqa: F401
from akg.graph.io.onnx import load_onnx, parse_onnx  # noqa: F401
from akg.graph.io.torch_fx import TorchModel, import_fx  # noqa: F401
from akg.graph.ir import Graph

# suffix -> loader, derived from FRONTENDS (each format's module registers its frontend)
LOADERS = SuffixTable()


def load_model(model: str | Path | Any) -> Graph:
    """A Graph from a model file (the reader chosen by its suffix) or an in-memory model: a
    composite-JSON dict or list, MindIR bytes or a ModelProto, an `onnx.ModelProto`, a str of `.mir` text (a str
    that is not `.mir` text is a path); a Graph is returned as it is."""
    if isinstance(model, Graph):
        return model
    if isinstance(model, os.PathLike) or (isinstance(model, str) and not FRONTENDS.get("mir").accepts(model)):
        path = Path(model)
        frontend = frontend_for_suffix(path.suffix)
        if frontend is None:
            raise ImportFormatError(
                f"{path}: unknown model format '{path.suffix}' (known: {', '.join(sorted(LOADERS))})"
            )
        if not path.exists():
            raise ImportFormatError(f"{path}: no such file")
        return frontend.load(path)
    return frontend_for(model).convert(model)

"""Model formats in and out of the graph IR (`.mir` text; importers of other formats)."""

from akg.graph.io.mir import emit_mir, load_mir, parse_mir, save_mir  # noqa: F401

#!/usr/bin/env python
"""Check the import contracts of pyproject.toml ([tool.importlinter]) with import-linter.

The top-level folders (graph/, polyhedral/, ...) install as subpackages of `akg`, a layout
import-linter cannot read from the source tree, so the package is first staged as one tree
(akg/, with graph/ as akg/graph/ and so on, as setup.py maps them) in a temporary folder.

    python scripts/lint_imports.py [--keep DIR]    # exit code 0: every contract kept
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = {"graph": "graph", "polyhedral": "polyhedral", "schedules": "schedules", "tuner": "tuner", "db": "db"}


def stage(into: Path, migrations: bool = False) -> Path:
    """Copy the package's Python files into `into`/akg as one tree; returns `into`. The
    database migrations (alembic scripts, not part of the layering) only with `migrations`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *(() if migrations else ("migrations",)))
    shutil.copytree(ROOT / "akg", into / "akg", ignore=ignore)
    for name, folder in SUBPACKAGES.items():
        shutil.copytree(ROOT / folder, into / "akg" / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def lint(staged: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(staged)}
    return subprocess.run([str(exe) if exe.exists() else "lint-imports", str(staged / "pyproject.toml"),
                           "--no-cache"], cwd=staged, env=env, capture_output=True, text=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="stage here and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.keep:
        result = lint(stage(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="akg-lint-") as tmp:
            result = lint(stage(Path(tmp)))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

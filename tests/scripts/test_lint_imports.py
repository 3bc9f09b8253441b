"""The import contracts of pyproject.toml hold (scripts/lint_imports.py), and each contract
fails when a forbidden import is planted in a staged copy of the package."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("lint-imports") is None
                                and not Path(sys.executable).with_name("lint-imports").exists(),
                                reason="import-linter is not installed (pip install -e '.[test]')")


def _tool():
    spec = importlib.util.spec_from_file_location("lint_imports", ROOT / "scripts" / "lint_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_contracts_are_kept(tmp_path):
    result = _tool().lint(_tool().stage(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("graph/ir.py", "import islpy", "Only akg.polyhedral imports islpy"),
    ("compiler.py", "from akg.backends.cpu import CpuTarget", "Shared code imports no target's own files"),
    ("runtime.py", "from akg.compiler import build", "Layers"),
    ("graph/fuse.py", "from akg.polyhedral import tree", "Layers"),
    ("target.py", "from akg.polyhedral.astgen import LoweringHooks", "Targets, errors and the registry are leaves"),
])
def test_a_planted_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    tool = _tool()
    staged = tool.stage(tmp_path)
    path = staged / "akg" / module
    path.write_text(path.read_text() + f"\n{line}  # planted\n")
    result = tool.lint(staged)
    assert result.returncode != 0
    broken = [ln for ln in result.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(ln.startswith(contract) for ln in broken), result.stdout

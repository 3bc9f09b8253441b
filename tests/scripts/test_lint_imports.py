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
    ("polyhedral/astgen.py", "from akg.schedules.npu_conv import conv_shape", "Shared code imports no target's own files"),
    ("tuner/tune.py", "from akg.schedules.cuda_shared import shared_bytes", "Shared code imports no target's own files"),
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


def test_every_target_file_is_forbidden_to_shared_code():
    # a target's recipe split over several modules (schedules/cuda.py, cuda_shared.py, ...) is
    # sibling modules, not a package: each must be named, or shared code could import it unseen
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (shared,) = [c for c in contracts if c["name"] == "Shared code imports no target's own files"]
    shared_schedules = {"__init__", "space", "recipe"}
    target_files = {f"akg.schedules.{p.stem}" for p in (ROOT / "schedules").glob("*.py") if p.stem not in shared_schedules}
    target_files |= {f"akg.backends.{p.name}" for p in (ROOT / "akg" / "backends").iterdir()
                     if p.is_dir() and (p / "__init__.py").exists()}
    assert target_files, "no target files found"
    assert target_files <= set(shared["forbidden_modules"]), sorted(target_files - set(shared["forbidden_modules"]))

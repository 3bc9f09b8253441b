"""Packaging for akg: the top-level folders install as subpackages of one `akg` package."""

import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "akg" / "_version.py").read_text()).group(1)

# Folder -> import name (see docs/architecture.md, "Folders and import names").
SUBPACKAGES = {
    "akg.graph": "graph",
    "akg.polyhedral": "polyhedral",
    "akg.schedules": "schedules",
    "akg.tuner": "tuner",
    "akg.db": "db",
}


def find_packages_under(root: str, prefix: str) -> dict[str, str]:
    """Every folder holding an __init__.py below `root`, as {import name: folder}."""
    found = {}
    for init in sorted((HERE / root).rglob("__init__.py")):
        rel = init.parent.relative_to(HERE / root)
        name = ".".join((prefix, *rel.parts)) if rel.parts else prefix
        found[name] = init.parent.relative_to(HERE).as_posix()
    return found


package_dir = find_packages_under("akg", "akg")
for name, folder in SUBPACKAGES.items():
    package_dir.update(find_packages_under(folder, name))

setup(
    name="akg",
    version=VERSION,
    description="Automatic operator generator and kernel autotuner (polyhedral scheduling on isl, TVM TIR backends)",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.13",
    packages=sorted(package_dir),
    package_dir=package_dir,
    package_data={
        "akg": ["py.typed"],
        # Alembic's environment and revisions are scripts, not modules: installed as data.
        "akg.db": ["migrations/*.py", "migrations/*.mako", "migrations/versions/*.py"],
    },
    install_requires=[
        "numpy>=1.26,<3",
        "scipy>=1.11,<2",
        "ml_dtypes>=0.5",  # bfloat16 and float8 arrays (NumPy dtypes by name)
        "apache-tvm>=0.27,<0.28",
        # 0.1.15 segfaults in tvm.ir.save_json (kills MetaSchedule's database).
        "apache-tvm-ffi<0.1.15",
        "islpy>=2024.1",
        "xgboost>=2.0,<4",
        "sqlalchemy>=2.0,<3",
        "alembic>=1.12,<2",
        "psycopg[binary]>=3.1,<4",  # PostgreSQL driver for a shared tuning database
        "click>=8.1,<9",
        "rich>=13,<16",
        "psutil>=5.9",
        "cloudpickle>=2.0",
        # MindIR import; graph/io/_mind_ir_pb2.py is protoc 25.1 gencode, which loads on 4.25.1 to 7.x
        "protobuf>=4.25.1,<8",
    ],
    extras_require={
        "test": [
            "pytest>=8,<10",
            "hypothesis>=6.100",
            "pytest-timeout>=2.2",
            "pytest-xdist>=3.5",  # the test command runs in 2 worker processes (`pytest -n 2`)
            "import-linter>=2.1,<3",  # the import contracts (scripts/lint_imports.py)
            "onnx>=1.16",  # the ONNX importer's tests and the generated ONNX node suite
            "torch==2.13.0",  # the torch.compile backend's tests (tests/graph/io/test_torch_fx.py)
            "dask[distributed]>=2024.1",  # the Dask tuning runner's tests (a real LocalCluster)
            "matplotlib>=3.7",  # `akg report`'s figures
        ],
        "onnx": ["onnx>=1.16"],  # reading .onnx models (graph/io/onnx.py); tested with 1.23.2
        "torch": ["torch==2.13.0"],  # torch.compile(backend="akg") and torch.fx import (docs/torch.md)
        "farm": ["dask[distributed]>=2024.1"],  # `akg tune --workers/--scheduler`: measuring on Dask workers
        "report": ["matplotlib>=3.7"],  # `akg report` (HTML with figures) and scripts/nightly.py
    },
    entry_points={
        "console_scripts": ["akg = akg.cli:main"],
        "torch_dynamo_backends": ["akg = akg.dynamo:akg_backend"],  # torch.compile(backend="akg")
    },
)

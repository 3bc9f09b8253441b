"""The NPU tests share hand-written programs (`npu_programs.py`, beside this file)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

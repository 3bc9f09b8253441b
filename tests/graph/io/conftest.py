"""The fuzz tests' tally (test_fuzz.py): how many mutated inputs of each format ran, and what came
of them, printed at the end of the session."""

from __future__ import annotations

import pytest

FUZZ_COUNTS: dict[str, dict[str, float]] = {}


@pytest.fixture(name="fuzz_tally", scope="session")
def fuzz_tally_fixture() -> dict[str, dict[str, float]]:
    """format -> {"inputs": n, "graphs": n, "errors": n, "seconds": s}, added to by each fuzz test."""
    return FUZZ_COUNTS


def pytest_terminal_summary(terminalreporter):
    if not FUZZ_COUNTS:
        return
    terminalreporter.section("fuzzed parsers and importers")
    for fmt, c in FUZZ_COUNTS.items():
        terminalreporter.write_line(
            f"{fmt}: {int(c['inputs'])} mutated inputs in {c['seconds']:.1f}s: {int(c['graphs'])} valid graphs, "
            f"{int(c['errors'])} typed errors, no other exception")

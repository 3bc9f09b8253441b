"""Fixtures of the report tests: a database from a real tune of examples/mlp.mir (once per
session), a baseline export of it with a planted regression and improvement, and a reader of
an HTML page's tables."""

from __future__ import annotations

import json
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

TUNE_TRIALS = 12  # four kernels, three measurements each: about 30 s on two cores


@dataclass(frozen=True)
class Tuned:
    """A tuning database (SQLite file) and the tune that wrote it."""

    path: Path
    url: str
    result: object


@pytest.fixture(scope="session")
def tuned(tmp_path_factory, examples_dir) -> Tuned:
    """examples/mlp.mir tuned on this machine's CPU with real worker processes."""
    import akg

    path = tmp_path_factory.mktemp("report") / "tuning.db"
    result = akg.tune(examples_dir / "mlp.mir", "cpu", trials=TUNE_TRIALS, db=str(path))
    return Tuned(path, f"sqlite:///{path}", result)


@pytest.fixture()
def database(tuned):
    from akg.db import open_database

    db = open_database(tuned.url)
    yield db
    db.close()


@dataclass(frozen=True)
class Planted:
    """A baseline export with one kernel's best halved (now a regression) and another's
    doubled (now an improvement)."""

    path: Path
    regressed: str  # workload keys
    improved: str


@pytest.fixture()
def planted(database, tmp_path) -> Planted:
    export = tmp_path / "tuned.jsonl"
    database.export_jsonl(export)
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    best: dict[str, dict] = {}
    for obj in lines:
        if obj["kind"] == "record" and obj["status"] == "ok":
            if obj["workload"] not in best or obj["cost"] < best[obj["workload"]]["cost"]:
                best[obj["workload"]] = obj
    regressed, improved = sorted(best)[:2]
    best[regressed]["cost"] /= 2  # the baseline was twice as fast: now a regression
    for obj in lines:  # the baseline was twice as slow (every record): now an improvement
        if obj["kind"] == "record" and obj["workload"] == improved and obj["cost"] is not None:
            obj["cost"] *= 2
    path = tmp_path / "baseline.jsonl"
    path.write_text("".join(json.dumps(obj) + "\n" for obj in lines))
    return Planted(path, regressed, improved)


class _Tables(HTMLParser):
    """Every <table id=...>: its rows, each a dict of the row's attributes (`attrs`) and its
    cells as (text, attributes) under the column headers."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[dict]] = {}
        self._table = self._row = self._cell = None
        self._headers: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table, self._headers = attrs.get("id", f"table{len(self.tables)}"), []
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = {"attrs": attrs, "cells": []}
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [tag, "", attrs]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row["cells"].append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            cells = self._row["cells"]
            if cells and all(c[0] == "th" for c in cells) and not self._headers and self._table != "meta":
                self._headers = [c[1].strip() for c in cells]
            elif self._headers:
                row = {h: (c[1].strip(), c[2]) for h, c in zip(self._headers, cells)}
                self.tables[self._table].append({"attrs": self._row["attrs"], **row})
            else:
                self.tables[self._table].append({"attrs": self._row["attrs"],
                                                 **{cells[0][1].strip(): (cells[1][1].strip(), cells[1][2])}})
            self._row = None
        elif tag == "table":
            self._table = None


def read_tables(page: str) -> dict[str, list[dict]]:
    parser = _Tables()
    parser.feed(page)
    parser.close()
    return parser.tables


@pytest.fixture(scope="session", name="read_tables")
def read_tables_fixture():
    """`read_tables(html)`: {table id: [row, ...]}, a row being {"attrs": the <tr>'s attributes,
    column header: (text, the cell's attributes), ...}; the meta table's rows are {name: ...}."""
    return read_tables

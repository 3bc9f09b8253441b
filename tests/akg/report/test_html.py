"""akg.report.html on a database from a real tune: the page opens in headless Chromium without
errors, its tables hold the database's numbers, a planted regression is flagged, it loads
nothing from outside and escapes what it shows."""

import base64
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from akg.db import InMemoryDatabase, Record, TargetInfo, Workload
from akg.report import collect, compare, format_cost, load_baseline, render_html, write_html

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and Path(p).exists()), None)


def _dump_dom(page: Path) -> tuple[str, str]:
    """(the DOM Chromium built from the page, its log on stderr)."""
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                          "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout, run.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs it: apt-get install chromium)")
def test_the_page_opens_in_chromium_and_its_tables_hold_the_database_numbers(database, planted, tmp_path,
                                                                             read_tables):
    data = collect(database)
    baseline = load_baseline(planted.path)
    found = compare(data, baseline)
    page = write_html(data, found, tmp_path / "report.html", baseline=baseline, threshold=0.05)
    dom, log = _dump_dom(page)
    console = [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert not console, console  # no script errors or console messages (the page has no script)
    assert "akg tuning report" in dom
    tables = read_tables(dom)

    kernels = {row["attrs"]["data-key"]: row for row in tables["kernels"]}
    workloads = {w.key: w.name for w in database.workloads()}
    assert set(kernels) == set(workloads) and len(kernels) == 4
    for key, row in kernels.items():
        target = row["attrs"]["data-target"]
        records = database.records(key, target)
        best = database.best(key, target)
        assert row["kernel"][0] == workloads[key]
        assert row["best"] == (format_cost(best.cost, "s"), {"class": "num", "data-value": repr(best.cost)})
        assert row["trials"][0] == str(len(records))
        assert int(row["failures"][0]) == sum(1 for r in records if not r.ok)
        verdict = database.verdict(key, target)
        default = next(c for c in verdict.contenders if c.is_default)
        assert float(row["default"][1]["data-value"]) == default.cost
        assert float(row["chosen"][1]["data-value"]) == verdict.cost
        assert row["speed-up"][0] == f"{default.cost / verdict.cost:.2f}x"

    (model,) = tables["models"]
    entry = database.models()[0]
    assert model["model"][0] == entry.name == "mlp"
    expected = sum(n * database.best(key, entry.target_key).cost for key, n in entry.kernels)
    assert float(model["best"][1]["data-value"]) == pytest.approx(expected, rel=1e-12)
    assert model["best"][0] == format_cost(float(model["best"][1]["data-value"]), "s")

    statuses = {row["status"][0]: int(row["measurements"][0]) for row in tables["failures"]}
    assert statuses["ok"] == sum(1 for r in database.records() if r.ok)
    assert sum(statuses.values()) == len(database.records())

    changes = {(row["attrs"]["data-kind"], row["attrs"]["data-key"]): row for row in tables["changes"]}
    regressed = changes[("kernel", planted.regressed)]
    assert regressed["attrs"]["class"] == "regression" and "regression" in regressed["verdict"][0]
    assert float(regressed["baseline"][1]["data-value"]) == database.best(planted.regressed, entry.target_key).cost / 2
    assert changes[("kernel", planted.improved)]["attrs"]["class"] == "improvement"
    assert changes[("model", "mlp")]["attrs"]["class"] in ("regression", "improvement", "same")
    regressions = [c.name for c in found if c.verdict == "regression"]
    assert f"{len(regressions)} regression(s) beyond 5.0% against the baseline: {', '.join(regressions)}" in dom
    meta = {next(iter(k for k in row if k != "attrs")): next(v for k, v in row.items() if k != "attrs")[0]
            for row in tables["meta"]}
    assert meta["database"] == database.url and meta["baseline"] == str(planted.path)


def test_the_page_is_self_contained(database):
    page = render_html(collect(database), [])
    assert "<script" not in page and "<link" not in page and "@import" not in page
    sources = re.findall(r'\b(?:src|href)="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/svg+xml;base64,") for s in sources)
    assert "url(" not in page
    for uri in sources:  # each figure is a well-formed SVG
        root = ET.fromstring(base64.b64decode(uri.split(",", 1)[1]))
        assert root.tag.endswith("svg")
    assert len(sources) == 3  # curves against trial and wall time, statuses


def test_names_are_escaped_and_unknowns_shown_as_dashes():
    db = InMemoryDatabase()
    db.register_target(TargetInfo("cpu-<b>"))
    db.register_workload(Workload("k&1", '<script>alert("x")</script>'))
    db.add_many([Record("k&1", "cpu-<b>", {"n": 1}, "ok", 1.5e-3), Record("k&1", "cpu-<b>", {"n": 2}, "timeout")])
    page = render_html(collect(db), [])
    assert "<script>" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert 'data-key="k&amp;1"' in page and "cpu-&lt;b&gt;" in page
    assert ">1.5 ms<" in page and 'data-value="">-<' in page  # no default known


def test_empty_data_says_so():
    page = render_html(collect(InMemoryDatabase()), [])
    assert "No records to report" in page and "<img" not in page

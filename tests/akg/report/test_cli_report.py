"""`akg report` (akg/cli_report.py) on a database from a real tune: HTML and JSON out, exit
code 0 with regressions, typed errors for bad options, and a clear message for nothing to
report."""

import json

import pytest

from akg.cli import main


def test_html_report_with_a_planted_regression_exits_zero(tuned, planted, tmp_path, capsys, read_tables):
    out = tmp_path / "deep" / "report.html"
    code = main(["report", "--db", str(tuned.path), "--baseline", str(planted.path), "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert out.exists() and f"wrote {out}" in captured.out
    assert "regression(s) beyond 5.0%" in captured.out and "mlp.k" in captured.out
    tables = read_tables(out.read_text())
    flagged = [row["attrs"]["data-key"] for row in tables["changes"] if row["attrs"]["class"] == "regression"]
    assert planted.regressed in flagged
    meta = {k: v[0] for row in tables["meta"] for k, v in row.items() if k != "attrs"}
    assert meta["command"].startswith(f"akg report --db sqlite:///{tuned.path} --baseline {planted.path}")


def test_json_to_stdout_keeps_the_summary_off_stdout(tuned, planted, capsys):
    code = main(["report", "--db", str(tuned.path), "--format", "json", "--baseline", str(planted.path),
                 "--threshold", "0.1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["threshold"] == 0.1 and doc["summary"]["regressions"] >= 1
    assert "regression(s) beyond 10.0%" in captured.err


def test_since_and_target_filter(tuned, capsys):
    assert main(["report", "--db", str(tuned.path), "--format", "json", "--since", "2000-01-01", "--target", "cpu"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["since"] == "2000-01-01T00:00:00+00:00" and len(doc["kernels"]) == 4
    assert doc["target"] == doc["kernels"][0]["target_key"]
    assert main(["report", "--db", str(tuned.path), "--format", "json", "--since", "2999-01-01T00:00Z"]) == 6
    assert "nothing to report" in capsys.readouterr().err
    assert main(["report", "--db", str(tuned.path), "--format", "json", "--target", "npu"]) == 6
    err = capsys.readouterr().err
    assert "no records on target npu" in err and "targets with records: cpu-" in err


@pytest.mark.parametrize("args, code, message", [
    (["--since", "yesterday"], 2, "'yesterday' is not an ISO date"),
    (["--threshold", "-0.1"], 2, "--threshold"),
    (["--format", "pdf"], 2, "'pdf' is not one of"),
    ([], 2, "an HTML report needs -o FILE"),
    (["--baseline", "/nonexistent/base.jsonl", "-o", "x.html"], 2, "does not exist"),
])
def test_bad_options_are_typed_errors(tuned, capsys, args, code, message):
    assert main(["report", "--db", str(tuned.path), *args]) == code
    assert message in capsys.readouterr().err


def test_an_empty_or_absent_database_is_a_clear_error(tmp_path, capsys):
    from akg.db import open_database

    empty = tmp_path / "empty.db"
    open_database(str(empty)).close()
    assert main(["report", "--db", str(empty), "-o", str(tmp_path / "r.html")]) == 6
    assert f"nothing to report: database sqlite:///{empty} has no records" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
    absent = tmp_path / "absent.db"
    assert main(["report", "--db", str(absent), "-o", str(tmp_path / "r.html")]) == 6
    assert f"there is no database at {absent}" in capsys.readouterr().err
    assert not absent.exists()  # a report never creates a database

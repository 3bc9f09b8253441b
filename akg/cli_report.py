"""`akg report`: a tuning database as an HTML page or JSON, with a summary in the terminal,
optionally against a baseline export (regressions beyond a noise threshold flagged)."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime
from pathlib import Path

import click

from akg.cli import DB_HELP, Finite, cli, console, make_parent, writable
from akg.errors import DatabaseError


class NothingToReportError(DatabaseError):
    """The database (or the part of it asked for) holds no records."""


class IsoTime(click.ParamType):
    """An ISO 8601 date or date and time (`2025-01-31`, `2025-01-31T18:00`, `...+02:00`, `...Z`);
    without a zone it is UTC."""

    name = "date"

    def convert(self, value, param, ctx):
        if isinstance(value, datetime):
            return value
        try:
            return datetime.fromisoformat(str(value).strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            self.fail(f"{value!r} is not an ISO date or date and time (e.g. 2025-01-31 or 2025-01-31T18:00).",
                      param, ctx)

    def get_metavar(self, param, *args, **kwargs) -> str:  # click 8.2+ passes ctx=
        return "DATE"


@click.command("report")
@click.option("--db", "db_url", default=None, help=DB_HELP)
@click.option("--since", type=IsoTime(), default=None,
              help="Only kernels measured at or after this ISO date/time (UTC unless it says otherwise); "
                   "trials, failures and curves count those measurements.")
@click.option("--target", default=None, help="Only this target: a key as the database stores it, or a name "
              "(cpu, npu) for this machine's key. Default: every target.")
@click.option("--baseline", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A JSON-lines export (akg db export) to compare the best costs against.")
@click.option("--threshold", default=0.05, show_default=True, type=Finite(0.0),
              help="Noise threshold: a cost higher than the baseline's by more than this fraction is a "
                   "regression, lower by more is an improvement.")
@click.option("--format", "fmt", type=click.Choice(["html", "json"]), default="html", show_default=True)
@click.option("-o", "--output", default=None,
              help="Where to write the report; `-` for stdout. Required for html; json defaults to stdout.")
def report_cmd(db_url: str | None, since: datetime | None, target: str | None, baseline: Path | None,
               threshold: float, fmt: str, output: str | None) -> None:
    """Report on a tuning database: per-model and per-kernel tables (best time, speed-up over the
    default config, trials, failures by status), tuning curves and failure statuses, and with
    --baseline the regressions and improvements beyond --threshold. Prints a summary; the exit
    code is 0 whatever the comparison found (scripts/nightly.py decides what fails)."""
    from akg.cli_tuning import database_name
    from akg.db import open_database
    from akg.report import collect, compare, load_baseline, print_summary, to_json, write_html
    from akg.report.html import render_html

    if output is None and fmt == "html":
        raise click.UsageError("an HTML report needs -o FILE (or -o - for stdout)")
    to_stdout = output in (None, "-")
    path = None if to_stdout else writable(Path(output))
    _require_database(db_url)
    database = open_database(db_url)
    target_key = _target_key(database, target) if target else None
    base = load_baseline(baseline) if baseline is not None else None
    data = collect(database, since=since, target_key=target_key)
    where = database_name(database, db_url)
    if data.empty:
        raise NothingToReportError(_nothing(database, where, data.since, target_key))
    data = _with_command(data, getattr(database, "url", where), target, baseline, threshold, fmt, output)
    changes = compare(data, base, threshold) if base is not None else []
    extra = {"baseline": base, "threshold": threshold if base is not None else None}
    if fmt == "json":
        text = json.dumps(to_json(data, changes, **extra), indent=2, allow_nan=False) + "\n"
    else:
        text = render_html(data, changes, **extra) if to_stdout else None
    if to_stdout:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        make_parent(path)
        if fmt == "json":
            path.write_text(text, encoding="utf-8")
        else:
            write_html(data, changes, path, **extra)
    from rich.console import Console

    # the summary goes where it does not mix with a report written to stdout
    print_summary(data, changes, Console(stderr=True, highlight=False, soft_wrap=True) if to_stdout else console,
                  **extra)
    if path is not None:
        click.echo(f"wrote {path}", err=to_stdout)


def _require_database(db_url: str | None) -> None:
    """A report never creates a database: an SQLite file that is not there is nothing to report."""
    from akg.db import resolve_url

    url = resolve_url(db_url)
    if url.startswith("sqlite:///"):
        file = url[len("sqlite:///"):].split("?", 1)[0]
        if file and file != ":memory:" and not Path(file).exists():
            raise NothingToReportError(f"nothing to report: there is no database at {file}")


def _target_key(database, target: str) -> str:
    """A target key of the database, or a target name turned into this machine's key."""
    from akg.target import get_target

    known = [t.key for t in database.targets()]
    if target in known:
        return target
    return get_target(target).key


def _nothing(database, where: str, since: datetime | None, target_key: str | None) -> str:
    scope = "".join([f" on target {target_key}" if target_key else "",
                     f" since {since.isoformat()}" if since is not None else ""])
    if target_key and database.count(target_key=target_key) == 0:
        keys = ", ".join(t.key for t in database.targets() if database.count(target_key=t.key)) or "none"
        return f"nothing to report: database {where} has no records{scope} (targets with records: {keys})"
    return f"nothing to report: database {where} has no records{scope}"


def _with_command(data, where: str, target, baseline, threshold, fmt, output):
    """The report with the command that made it (the database named without its password)."""
    from dataclasses import replace

    words = ["akg", "report", "--db", where]
    if data.since is not None:
        words += ["--since", data.since.isoformat()]
    if target:
        words += ["--target", target]
    if baseline is not None:
        words += ["--baseline", str(baseline), "--threshold", f"{threshold:g}"]
    words += ["--format", fmt, "-o", output or "-"]
    return replace(data, command=shlex.join(words))


COMMANDS = (report_cmd,)

for _command in COMMANDS:  # when this module was imported before akg.cli (see akg.cli._register_commands)
    if _command.name not in cli.commands:
        cli.add_command(_command)

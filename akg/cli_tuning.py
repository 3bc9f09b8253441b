"""`akg tune` and `akg db ...`: tuning from the command line and the tuning database."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(highlight=False)

DB_HELP = "Tuning database: an SQLAlchemy URL or an SQLite file path (default: $AKG_DB, else ~/.cache/akg/tuning.db)."


def _seconds(cost: float | None) -> str:
    if cost is None:
        return "-"
    return f"{cost * 1e6:.1f} us" if cost < 1e-3 else f"{cost * 1e3:.3f} ms"


@click.command("tune")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", default="cpu", show_default=True)
@click.option("--trials", default=64, show_default=True,
              help="Measurements in total for the model's kernels, counting those already in the database.")
@click.option("--db", "db_url", default=None, help=DB_HELP)
@click.option("--timeout", default=10.0, show_default=True, help="Seconds a candidate may run.")
@click.option("--seed", default=0, show_default=True)
@click.option("--cost-model", default="xgb", show_default=True, help="xgb or random.")
@click.option("--search", default="evolutionary", show_default=True, help="evolutionary or random.")
@click.option("--batch", default=16, show_default=True, help="Candidates measured per round.")
def tune_cmd(model: Path, target: str, trials: int, db_url: str | None, timeout: float, seed: int,
             cost_model: str, search: str, batch: int) -> None:
    """Tune every kernel of a model (or one kernel file); resumable, Ctrl-C stops cleanly."""
    from akg.db import open_database
    from akg.target import get_target
    from akg.tuner.tune import tune

    target_ = get_target(target)
    database = open_database(db_url)
    failures = 0
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console) as bar:
        task_id = bar.add_task(f"tuning {model.name}", total=trials, status="starting")

        def progress(done, total, task, results):
            nonlocal failures
            failures += sum(1 for r in results if str(r.status) != "ok")
            best = task.best
            bar.update(task_id, completed=done,
                       status=f"{task.name}: best {_seconds(best.cost if best else None)}, failures {failures}")

        result = tune(model, target=target_, trials=trials, db=database, timeout=timeout, seed=seed,
                      cost_model=cost_model, search=search, batch=batch, progress=progress)
    table = Table(title=f"{model.name} on {target_}")
    for col in ("kernel", "x", "trials", "failed", "best"):
        table.add_column(col)
    for k in result.kernels:
        table.add_row(k.name, str(k.occurrences), str(k.trials), str(k.failures), _seconds(k.best_cost))
    console.print(table)
    console.print(f"{result.new_measurements} new measurements in {result.seconds:.0f}s")
    if result.interrupted:
        console.print("interrupted: every measurement so far is saved; run the same command to resume")
        raise SystemExit(130)


@click.group("db")
def db_group() -> None:
    """Inspect the tuning database."""


@db_group.command("ls")
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_ls(db_url: str | None) -> None:
    """Workloads with their record counts and best times per target."""
    from akg.db import open_database

    database = open_database(db_url)
    table = Table()
    for col in ("workload", "name", "target", "records", "best"):
        table.add_column(col)
    for w in database.workloads():
        for t in database.targets():
            n = database.count(w.key, t.key)
            if n:
                best = database.best(w.key, t.key)
                table.add_row(w.key, w.name, t.key, str(n), _seconds(best.cost if best else None))
    console.print(table)


@db_group.command("best")
@click.argument("workload")
@click.option("--target", default="cpu", show_default=True)
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_best(workload: str, target: str, db_url: str | None) -> None:
    """The best record of a workload (key or unique key prefix)."""
    from akg.db import open_database
    from akg.errors import DatabaseError
    from akg.target import get_target

    database = open_database(db_url)
    matches = [w for w in database.workloads() if w.key.startswith(workload)]
    if len(matches) != 1:
        raise DatabaseError(f"{len(matches)} workloads match '{workload}'")
    best = database.best(matches[0].key, get_target(target).key)
    if best is None:
        raise DatabaseError(f"no successful record for {matches[0].key} on {get_target(target).key}")
    console.print(f"{matches[0].key} ({matches[0].name}): {_seconds(best.cost)}")
    click.echo(best.config)


@db_group.command("export")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_export(path: Path, db_url: str | None) -> None:
    """Write every record as JSON lines."""
    from akg.db import open_database

    console.print(f"exported {open_database(db_url).export_jsonl(path)} records to {path}")


@db_group.command("import")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_import(path: Path, db_url: str | None) -> None:
    """Add the records of a JSON-lines file (records already present are kept)."""
    from akg.db import open_database
    from akg.errors import DatabaseError

    if not path.exists():
        raise DatabaseError(f"{path}: no such file")
    console.print(f"imported {open_database(db_url).import_jsonl(path)} new records from {path}")


COMMANDS = (tune_cmd, db_group)

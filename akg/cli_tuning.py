"""`akg tune` and `akg db ...`: tuning from the command line and the tuning database."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from akg.cli import DB_HELP, SEED, Finite, cli, console, make_parent, print_table, writable
from akg.errors import AkgError


def _cost(cost: float | None, unit: str = "s") -> str:
    """A cost in its unit: seconds as us/ms, others (simulated cycles) as counts."""
    if cost is None:
        return "-"
    if unit != "s":
        return f"{cost:,.0f} {unit}"
    return f"{cost * 1e6:.1f} us" if cost < 1e-3 else f"{cost * 1e3:.3f} ms"


def _speedup(default: float | None, best: float | None) -> str:
    if default is None or best is None or best <= 0:
        return "-"
    return f"{default / best:.2f}x"


def default_trial(task) -> tuple[str, float | None]:
    """How the target's default config of a tuning task fared: ("ok", cost), ("failed",
    None) or ("unmeasured", None). The default is the config `akg compile` uses untuned."""
    try:
        default = task.default_config().to_json()
    except AkgError:
        return "unmeasured", None
    for t in task.trials:
        if t.config.to_json() == default:
            return ("ok", t.cost) if t.status == "ok" and t.cost is not None else ("failed", None)
    return "unmeasured", None


def _versus_default(state: str, default: float | None, best: float | None, unit: str = "s") -> str:
    if state == "ok":
        return f"{_speedup(default, best)} over the default ({_cost(default, unit)})"
    return "default config failed" if state == "failed" else "default not measured yet"


class SchedulerAddress(click.ParamType):
    """A Dask scheduler's address: tcp://HOST:PORT (tls://, ucx://, ws://, wss:// too; HOST:PORT
    means tcp)."""

    name = "address"

    def convert(self, value, param, ctx):
        from akg.errors import ClusterError
        from akg.tuner.runner.dask_cluster import scheduler_address

        try:
            return scheduler_address(value)
        except ClusterError as e:
            self.fail(str(e), param, ctx)


def database_name(database, db_url: str | None) -> str:
    """The database a command uses, as a user would name it (URL without password)."""
    import os

    name = getattr(database, "url", None) or repr(database)
    if db_url:
        return name
    return name + (" (from $AKG_DB)" if os.environ.get("AKG_DB") else " (the default)")


@click.command("tune")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", default="cpu", show_default=True)
@click.option("--trials", default=64, show_default=True, type=click.IntRange(min=1),
              help="Measurements in total for the model's kernels, counting those already in the database.")
@click.option("--db", "db_url", default=None, help=DB_HELP)
@click.option("--timeout", default=10.0, show_default=True, type=Finite(0.0, min_open=True),
              help="Seconds a candidate may run (> 0).")
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--cost-model", default="xgb", show_default=True, help="xgb or random.")
@click.option("--search", default="evolutionary", show_default=True, help="evolutionary or random.")
@click.option("--batch", default=16, show_default=True, type=click.IntRange(min=1),
              help="Candidates measured per round.")
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Build and measure on a local Dask cluster of N worker processes (docs/farm.md).")
@click.option("--scheduler", default=None, type=SchedulerAddress(),
              help="Build and measure on the Dask cluster whose scheduler is at tcp://HOST:PORT (docs/farm.md).")
def tune_cmd(model: Path, target: str, trials: int, db_url: str | None, timeout: float, seed: int,
             cost_model: str, search: str, batch: int, workers: int | None, scheduler: str | None) -> None:
    """Tune every kernel of a model (or one kernel file); resumable, Ctrl-C stops cleanly.
    Without a terminal (a CI log, `| tee`) it prints one line per round instead of a bar."""
    import time

    if workers is not None and scheduler is not None:
        raise click.UsageError("--workers (a local Dask cluster) and --scheduler (an existing one) are mutually "
                               "exclusive")

    from akg.db import open_database
    from akg.target import get_target
    from akg.tuner.tune import tune

    target_ = get_target(target)
    database = open_database(db_url)
    where = database_name(database, db_url)
    tasks: dict[str, object] = {}  # workload key -> the tuner's task, as progress reports them
    first_error: dict[str, str] = {}  # kernel name -> the first failure's message
    failures = 0
    started = time.perf_counter()

    def describe(done, total, task, results) -> str:
        nonlocal failures
        tasks[task.key] = task
        bad = [r for r in results if str(r.status) != "ok"]
        if bad:
            first_error.setdefault(task.name, f"{bad[0].status}: {' '.join(bad[0].error.split())[:200]}")
        failed = len(bad)
        failures += failed
        best = task.best
        state, default = default_trial(task)
        return (f"{task.name}: +{len(results)} measured ({failed} failed), best "
                f"{_cost(best.cost if best else None, target_.cost_unit)}, "
                f"{_versus_default(state, default, best.cost if best else None, target_.cost_unit)}; "
                f"{failures} failures in all")

    if console.is_terminal:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console) as bar:
            task_id = bar.add_task(f"tuning {model.name}", total=trials, status="starting")

            def progress(done, total, task, results):
                bar.update(task_id, completed=done, status=describe(done, total, task, results))

            result = tune(model, target=target_, trials=trials, db=database, timeout=timeout, seed=seed,
                          cost_model=cost_model, search=search, batch=batch, progress=progress,
                          workers=workers, scheduler=scheduler)
    else:
        farm = (f"; measuring on {workers} local Dask workers" if workers else
                f"; measuring on the Dask cluster at {scheduler}" if scheduler else "")
        click.echo(f"tuning {model.name} on {target_}: {trials} trials in all, batches of {batch}; "
                   f"database {where}{farm}")
        sys.stdout.flush()

        def progress(done, total, task, results):
            click.echo(f"[{done}/{total} {time.perf_counter() - started:.0f}s] {describe(done, total, task, results)}")
            sys.stdout.flush()  # a killed run keeps every line so far

        result = tune(model, target=target_, trials=trials, db=database, timeout=timeout, seed=seed,
                      cost_model=cost_model, search=search, batch=batch, progress=progress,
                      workers=workers, scheduler=scheduler)
    _summary(model, target_, database, where, result, tasks)
    if result.interrupted:
        click.echo("interrupted: every measurement so far is saved; run the same command to resume")
        raise SystemExit(130)
    broken = [k for k in result.kernels if k.best_cost is None and k.trials and k.failures == k.trials]
    if broken:  # a nightly job must not pass on a model whose kernels cannot be built or run at all
        from akg.errors import CompileError

        for k in broken:
            click.echo(f"  {k.name}: {first_error.get(k.name, 'see `akg db ls` for the failures')}", err=True)
        raise CompileError(f"{len(broken)} of {len(result.kernels)} kernel(s) failed every config measured "
                           f"({', '.join(k.name for k in broken)}): the model cannot be compiled for {target_} "
                           "as it is")


def _summary(model: Path, target, database, where: str, result, tasks: dict) -> None:
    """The kernels' table with default and tuned times, the model's speed-up, the database."""
    defaults = _default_costs(model, target, database, result, tasks)
    unit = target.cost_unit
    table = Table(title=f"{model.name} on {target}")
    for col in ("kernel", "x", "trials", "failed", "default", "best", "speed-up", "compile uses"):
        table.add_column(col)
    for k in result.kernels:
        state, default = defaults[k.workload_key]
        shown = _cost(default, unit) if state == "ok" else ("failed" if state == "failed" else "not measured")
        trials = f"{k.trials} (+{k.new_trials})" if k.new_trials and k.new_trials != k.trials else str(k.trials)
        table.add_row(k.name, str(k.occurrences), trials, str(k.failures), shown, _cost(k.best_cost, unit),
                      _speedup(default, k.best_cost), _uses(k))
    print_table(table)
    _confirmation_lines(result)
    untuned = [k.name for k in result.kernels if k.best_cost is None]
    no_default = [k.name for k in result.kernels if k.best_cost is not None and defaults[k.workload_key][0] != "ok"]
    tuned = result.weighted_cost
    if tuned is not None:  # a kernel whose default won the final comparison runs its default
        tuned = sum(k.occurrences * (defaults[k.workload_key][1] if k.uses_default and defaults[k.workload_key][0]
                                     == "ok" else k.best_cost) for k in result.kernels)
    if untuned:
        click.echo(f"model: {len(untuned)} of {len(result.kernels)} kernel(s) have no measured time yet "
                   f"({', '.join(untuned)}), so the model has no speed-up figure yet: raise --trials")
    elif no_default:
        click.echo(f"model: {_cost(tuned, unit)} per run tuned (kernel times x occurrences); the default config of "
                   f"{', '.join(no_default)} was not measured or failed, so the speed-up over the defaults is unknown")
    else:
        default = sum(k.occurrences * defaults[k.workload_key][1] for k in result.kernels)
        click.echo(f"model: {_cost(tuned, unit)} per run tuned vs {_cost(default, unit)} with the default configs: "
                   f"{_speedup(default, tuned)} faster (kernel times x occurrences)")
    click.echo(f"{result.new_measurements} new measurements in {result.seconds:.0f}s; database: {where}")


def _uses(k) -> str:
    """What `akg compile` builds for a kernel after this tune (the summary's last column)."""
    if k.best_cost is None:
        return "default (nothing tuned)"
    if k.verdict is None:
        return "tuned, unconfirmed"
    if k.uses_default:
        tuned = k.verdict.contender("tuned")
        return "default (the tuned pick)" if tuned is not None and tuned.is_default else "default (won)"
    return "tuned" if k.verdict.role == "tuned" else k.verdict.role


def _confirmation_lines(result) -> None:
    """How the trials were spread and what the final comparison decided, in a few lines."""
    untried = result.untuned
    if untried:
        click.echo(f"trials: {len(untried)} of {len(result.kernels)} kernel(s) got none ({', '.join(untried)}): "
                   f"the budget is smaller than the number of kernels; raise --trials")
    confirmed = [k for k in result.kernels if k.verdict is not None]
    if not confirmed and not any(k.confirmation for k in result.kernels):
        return
    kept = [k.name for k in confirmed if k.uses_default and k.verdict.role != "tuned"]
    click.echo(f"final comparison (tuned pick vs runner-up vs default, alternating rounds in one process): "
               f"{len(confirmed) - len(kept)} of {len(result.kernels)} kernel(s) use a tuned config"
               + (f", {len(kept)} keep the default ({', '.join(kept)})" if kept else ""))
    for k in result.kernels:
        if k.confirmation and (k.verdict is None or k.verdict.role != "tuned"):
            click.echo(f"  {k.name}: {k.confirmation}")


def _default_costs(model: Path, target, database, result, tasks: dict) -> dict[str, tuple[str, float | None]]:
    """For each kernel of `result`, how its default config fared: from the tuner's tasks seen
    in this run, else from the database's records (kernels this run did not touch)."""
    out = {k.workload_key: default_trial(tasks[k.workload_key]) for k in result.kernels if k.workload_key in tasks}
    missing = [k for k in result.kernels if k.workload_key not in out]
    if not missing:
        return out
    from akg.graph.io import load_model
    from akg.schedules.space import Config
    from akg.tuner.task import Trial, TuningTask
    from akg.tuner.tune import kernels_of

    try:
        subgraphs = {sg.workload_key: sg for sg in kernels_of(load_model(model), target)}
    except AkgError:
        subgraphs = {}
    for k in missing:
        sg = subgraphs.get(k.workload_key)
        if sg is None:
            out[k.workload_key] = ("unmeasured", None)
            continue
        task = TuningTask(sg, target)
        task.trials = [Trial(Config.from_json(r.config), str(r.status), r.cost)
                       for r in database.history(k.workload_key, target.key)]
        out[k.workload_key] = default_trial(task)
    return out


@click.group("db")
def db_group() -> None:
    """Inspect the tuning database."""


@db_group.command("ls")
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_ls(db_url: str | None) -> None:
    """Workloads with their record counts, cheapest records and the config `akg compile`
    uses (the final comparison's winner, which may be the default) per target."""
    from akg.api import chosen_config
    from akg.db import open_database

    database = open_database(db_url)
    table = Table(title=f"tuning database {database_name(database, db_url)}")
    for col in ("workload", "name", "target", "records", "cheapest", "compile uses"):
        table.add_column(col)
    rows = 0
    for w in database.workloads():
        for t in database.targets():
            n = database.count(w.key, t.key)
            if n:
                best = database.best(w.key, t.key)
                _, uses = chosen_config(database.choice(w.key, t.key))
                table.add_row(w.key, w.name, t.key, str(n), _cost(best.cost, best.unit) if best else "-", uses)
                rows += 1
    click.echo(f"database: {database_name(database, db_url)}")
    if rows:
        table.title = None
        print_table(table)
    else:
        click.echo("no records")


@db_group.command("best")
@click.argument("workload")
@click.option("--target", default="cpu", show_default=True)
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_best(workload: str, target: str, db_url: str | None) -> None:
    """The config `akg compile` uses for a workload (key or unique key prefix): the winner of
    the tuner's final comparison, which may be the default, else the cheapest record
    (unconfirmed); then that config's JSON (`default` when the default is used)."""
    from akg.api import chosen_config
    from akg.db import open_database
    from akg.errors import DatabaseError
    from akg.target import get_target

    database = open_database(db_url)
    matches = [w for w in database.workloads() if w.key.startswith(workload)]
    if len(matches) != 1:
        raise DatabaseError(f"{len(matches)} workloads match '{workload}'")
    key = get_target(target).key
    choice = database.choice(matches[0].key, key)
    if choice is None:
        raise DatabaseError(f"no successful record for {matches[0].key} on {key}")
    config, uses = chosen_config(choice)
    best = database.best(matches[0].key, key)
    cheapest = f"; cheapest record {_cost(best.cost, best.unit)}" if best is not None else ""
    console.print(f"{matches[0].key} ({matches[0].name}): compile uses {uses}{cheapest}")
    click.echo(config.to_json() if config is not None else "default")


@db_group.command("export")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_export(path: Path, db_url: str | None) -> None:
    """Write every record as JSON lines."""
    from akg.db import open_database

    writable(path)
    database = open_database(db_url)
    make_parent(path)
    click.echo(f"exported {database.export_jsonl(path)} records from {database_name(database, db_url)} to {path}")


@db_group.command("import")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", "db_url", default=None, help=DB_HELP)
def db_import(path: Path, db_url: str | None) -> None:
    """Add the records of a JSON-lines file (records already present are kept)."""
    from akg.db import open_database
    from akg.errors import DatabaseError

    if not path.exists():
        raise DatabaseError(f"{path}: no such file")
    database = open_database(db_url)
    click.echo(f"imported {database.import_jsonl(path)} new records from {path} into {database_name(database, db_url)}")


COMMANDS = (tune_cmd, db_group)

for _command in COMMANDS:  # when this module was imported before akg.cli (see akg.cli._register_commands)
    if _command.name not in cli.commands:
        cli.add_command(_command)

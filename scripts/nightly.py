#!/usr/bin/env python
"""The nightly tuning job: retune a model zoo (scripts/nightly.toml) with a budget into the
shared tuning database, re-time every kernel's current best against the previous night's best
in alternating rounds in one runner worker, write the report and the night's records as
artifacts, and exit 1 when a kernel or a model got slower than the baseline beyond the
threshold (the offenders are listed). See docs/nightly.md.

    python scripts/nightly.py                                 # the zoo, default database
    python scripts/nightly.py --db postgresql://akg@dbhost/akg_tuning \\
        --baseline nightly-artifacts --out nightly-artifacts/2025-01-02

The baseline is the previous night's `records.jsonl` (`--baseline FILE`, or the newest one
in a folder; by default the newest beside `--out`). Without one (the first night) every
kernel is "new" and the job exits 0.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

from akg.errors import AkgError, InputError, OutputPathError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ZOO = ROOT / "scripts" / "nightly.toml"
DEFAULT_ARTIFACTS = Path("nightly-artifacts")
EXIT_REGRESSION = 1  # a kernel or model slower than the baseline beyond the threshold
EXIT_INTERRUPTED = 130
RECORDS_FILE = "records.jsonl"


class ZooError(InputError):
    """A malformed zoo file or a model it names that cannot be found (exit 3)."""


# --- the zoo ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooModel:
    name: str
    path: Path
    trials: int  # new measurements per night, on top of what the database holds


@dataclass(frozen=True)
class Zoo:
    models: tuple[ZooModel, ...]
    target: str = "cpu"
    db: str | None = None  # None: $AKG_DB, else the default database
    threshold: float = 0.05
    rounds: int = 7
    timeout: float = 10.0


def corpus_root() -> Path | None:
    """The shared corpus: $AKG_CORPUS, else ../shared/corpus beside the repository."""
    for candidate in (os.environ.get("AKG_CORPUS"), ROOT.parent / "shared" / "corpus"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def model_path(text: str, where: str) -> Path:
    """A zoo path: ${AKG_CORPUS} is the corpus folder, other ${VARS} come from the
    environment, relative paths are relative to the repository."""
    if "${AKG_CORPUS}" in text:
        corpus = corpus_root()
        if corpus is None:
            raise ZooError(f"{where}: {text} needs the shared corpus: set AKG_CORPUS to its folder "
                           f"(../shared/corpus beside the repository is used when present)")
        text = text.replace("${AKG_CORPUS}", str(corpus))
    expanded = os.path.expandvars(text)
    if "${" in expanded:
        raise ZooError(f"{where}: {text}: an environment variable it names is not set")
    path = Path(expanded).expanduser()
    return path if path.is_absolute() else ROOT / path


def load_zoo(path: Path) -> Zoo:
    """Read and check a zoo file (see scripts/nightly.toml); every model file must exist."""
    if tomllib is None:
        raise ZooError("reading the zoo needs Python 3.11 (tomllib)")
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ZooError(f"cannot read the zoo {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ZooError(f"{path}: {e}") from None
    unknown = set(raw) - {"target", "db", "threshold", "rounds", "timeout", "model"}
    if unknown:
        raise ZooError(f"{path}: unknown settings {sorted(unknown)}")
    entries = raw.get("model", [])
    if not isinstance(entries, list) or not entries:
        raise ZooError(f"{path}: no [[model]] entries")
    models, names = [], set()
    for k, entry in enumerate(entries, 1):
        where = f"{path}: model {k}"
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ZooError(f"{where}: needs a path")
        if set(entry) - {"name", "path", "trials"}:
            raise ZooError(f"{where}: unknown keys {sorted(set(entry) - {'name', 'path', 'trials'})}")
        file = model_path(entry["path"], where)
        name = entry.get("name", file.stem)
        trials = entry.get("trials", 64)
        if not isinstance(name, str) or not name or name in names:
            raise ZooError(f"{where}: the name {name!r} is empty or used twice")
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
            raise ZooError(f"{where} ({name}): trials must be a whole number >= 0, not {trials!r}")
        if not file.is_file():
            raise ZooError(f"{where} ({name}): {file} does not exist")
        names.add(name)
        models.append(ZooModel(name, file, trials))
    zoo = Zoo(tuple(models))
    settings = {key: raw[key] for key in ("target", "db", "threshold", "rounds", "timeout") if key in raw}
    return check_settings(replace(zoo, **settings), str(path))


def check_settings(zoo: Zoo, where: str) -> Zoo:
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if not isinstance(zoo.target, str) or not zoo.target:
        raise ZooError(f"{where}: target must be a target name")
    if zoo.db is not None and (not isinstance(zoo.db, str) or not zoo.db):
        raise ZooError(f"{where}: db must be a database URL or path")
    if not number(zoo.threshold) or zoo.threshold < 0:
        raise ZooError(f"{where}: threshold must be a fraction >= 0, not {zoo.threshold!r}")
    if isinstance(zoo.rounds, bool) or not isinstance(zoo.rounds, int) or zoo.rounds < 1:
        raise ZooError(f"{where}: rounds must be a whole number >= 1, not {zoo.rounds!r}")
    if not number(zoo.timeout) or zoo.timeout <= 0:
        raise ZooError(f"{where}: timeout must be seconds > 0, not {zoo.timeout!r}")
    return zoo


@dataclass
class ZooKernel:
    """One distinct kernel of the zoo (kernels are shared by workload key across models)."""

    subgraph: object  # akg.graph.subgraph.Subgraph
    models: list[tuple[str, int]] = field(default_factory=list)  # (model, occurrences)

    @property
    def key(self) -> str:
        return self.subgraph.workload_key

    @property
    def name(self) -> str:
        return self.subgraph.name


def zoo_kernels(zoo: Zoo, target) -> tuple[dict, dict[str, ZooKernel]]:
    """Each model's graph, and the zoo's distinct kernels for `target` with the models they
    occur in."""
    from akg.api import load
    from akg.graph.ir import Graph
    from akg.tuner.tune import kernels_of

    graphs, kernels = {}, {}
    for model in zoo.models:
        graph = load(model.path)
        # named as in the zoo: tune() registers the model under its graph's name, and two
        # files may hold graphs of one name (examples/mlp.mir, mindir/mlp.mindir)
        graphs[model.name] = graph = Graph(model.name, graph.inputs, graph.outputs, graph.nodes, graph.constants)
        mine = kernels_of(graph, target)
        for sg in mine:
            kernels.setdefault(sg.workload_key, ZooKernel(sg)).models.append((model.name, sg.occurrences))
        echo(f"zoo: {model.name} ({model.path}): {len(mine)} distinct kernel(s)")
    return graphs, kernels


# --- tuning ----------------------------------------------------------------------------------


def retune(zoo: Zoo, graphs: dict, kernels: dict[str, ZooKernel], target, database, farm: dict) -> bool:
    """Tune every model with its nightly budget (new measurements on top of those in the
    database); False when interrupted (every measurement so far is kept)."""
    from akg.tuner.tune import tune

    for model in zoo.models:
        keys = [k.key for k in kernels.values() if any(m == model.name for m, _ in k.models)]
        held = sum(database.count(key, target.key) for key in keys)
        if model.trials == 0:
            echo(f"tune {model.name}: no trials tonight")
            continue
        started = time.perf_counter()
        echo(f"tune {model.name}: {len(keys)} kernel(s), {model.trials} new trials ({held} in the database)")

        def progress(done, total, task, results, name=model.name, started=started, held=held):
            best = task.best
            echo(f"  [{name} {done - held}/{total - held} {time.perf_counter() - started:.0f}s] {task.name}: "
                 f"+{len(results)} measured, best {cost_text(best.cost if best else None, target.cost_unit)}")

        result = tune(graphs[model.name], target=target, trials=held + model.trials, db=database,
                      timeout=zoo.timeout, rounds=zoo.rounds, progress=progress, **farm)
        echo(f"tune {model.name}: {result.new_measurements} new measurements in {result.seconds:.0f}s")
        if result.interrupted:
            return False
    return True


def farm_options(workers: int | None, scheduler: str | None) -> dict:
    """`--workers`/`--scheduler` as tune()'s keywords; an InputError when this akg's tune()
    has no such parameter (the Dask runner is not installed in it)."""
    from akg.tuner.tune import tune

    wanted = {name: value for name, value in (("workers", workers), ("scheduler", scheduler)) if value is not None}
    known = inspect.signature(tune).parameters
    missing = [f"--{name}" for name in wanted if name not in known]
    if missing:
        raise InputError(f"{', '.join(missing)}: not available: this akg's tune() has no Dask runner")
    return wanted


# --- re-timing against the baseline -----------------------------------------------------------


@dataclass
class Timing:
    """One kernel's re-timing: tonight's best (`after`) and the baseline's best (`before`,
    None: not in the baseline, or its config no longer builds or runs), in one comparison."""

    kernel: ZooKernel
    after: float | None
    before: float | None
    unit: str
    in_baseline: bool = False
    note: str = ""


def chosen(choice, task, baseline: bool):
    """The Config a database `Choice` stands for: its tuned config, else the default config:
    tonight's default for tonight's choice (what `akg compile` builds), the default config as
    the baseline's night judged it (its verdict's winner) for the baseline."""
    from akg.schedules.space import Config

    if choice is not None and choice.config is not None:
        return Config.from_json(choice.config)
    if baseline and choice is not None and choice.verdict is not None:
        return Config.from_json(choice.verdict.config)
    return task.default_config()


def retime(kernels: list[ZooKernel], target, database, baseline, builder, runner, rounds: int,
           seed: int = 0) -> list[Timing]:
    """Time each kernel's current best against the baseline's best for the same workload and
    target, in alternating rounds in one runner worker (`Runner.compare`); the best round of
    each counts."""
    from akg.tuner.runner import CompareResult, TaskData
    from akg.tuner.task import TuningTask

    unit = str(target.cost_unit)
    out = []
    for n, kernel in enumerate(kernels, 1):
        sg = kernel.subgraph
        task = TuningTask(sg, target)
        base_choice = baseline.choice(kernel.key, target.key) if baseline is not None else None
        try:
            current = chosen(database.choice(kernel.key, target.key), task, baseline=False)
            before = chosen(base_choice, task, baseline=True) if base_choice is not None else None
        except AkgError as e:
            out.append(Timing(kernel, None, None, unit, note=f"no config to time: {e}"))
            echo(f"[{n}/{len(kernels)}] {kernel.name}: no config to time ({e})")
            continue
        same = before is not None and before.to_json() == current.to_json()
        configs = [current] if before is None or same else [current, before]
        try:
            builds = builder.build(sg.graph, target, configs)
            result = runner.compare(TaskData(sg.graph, seed, unit), builds,
                                    rounds if unit == "s" else 1).result()
        except Exception as e:  # noqa: BLE001  (one kernel's failure is its row, not the night's end)
            result = CompareResult.failed(len(configs), unit, f"{type(e).__name__}: {e}")
        costs = list(result.costs) + [None] * len(configs)
        after, base = costs[0], (costs[0] if same else costs[1] if before is not None else None)
        note = ""
        if after is None:
            note = f"tonight's best did not run: {_why(result, 0)}"
        elif before is not None and base is None:
            note = f"the baseline's config did not run tonight: {_why(result, 1)}"
        elif same:
            note = "same config as the baseline"
        timing = Timing(kernel, after, base, unit, base_choice is not None, note)
        out.append(timing)
        ratio = f" ({after / base:.2f}x)" if after and base else ""
        echo(f"[{n}/{len(kernels)}] {kernel.name}: tonight {cost_text(after, unit)} vs baseline "
             f"{cost_text(base, unit) if base_choice is not None else 'none'}{ratio}" + (f"; {note}" if note else ""))
    return out


def _why(result, k: int) -> str:
    if result.error:
        return result.error.splitlines()[0]
    status = result.statuses[k] if k < len(result.statuses) else "run_error"
    error = result.errors[k] if k < len(result.errors) else ""
    return f"{status}" + (f" ({error.splitlines()[0]})" if error else "")


def judge(before: float | None, after: float | None, threshold: float) -> str:
    """A row's verdict, as `akg report` judges (`akg.report.compare.judge`) but for a
    same-run comparison: "new" without a baseline time, "regression" when tonight's best is
    slower than the baseline's by more than `threshold` (a fraction) or did not run at all,
    "improvement" when the baseline's is slower by more than it, else "same"."""
    if before is None:
        return "new"
    if after is None or after > before * (1 + threshold):
        return "regression"
    if before > after * (1 + threshold):
        return "improvement"
    return "same"


def changes_of(zoo: Zoo, timings: list[Timing], baseline, target, threshold: float) -> list:
    """The report's rows (`akg.report.Change`) from the same-run times: one per kernel,
    one per model (occurrences x kernel time, summed over the kernels timed against the
    baseline), and one per baseline kernel that no zoo model has any more ("missing")."""
    from akg.report import Change
    from akg.report.compare import VERDICTS

    rows = []
    for t in timings:
        if t.after is None:
            verdict = "regression"  # tonight's best does not run: an offender, baseline or not
        elif not t.in_baseline or t.before is None:
            verdict = "new"  # not in the baseline, or its config no longer runs: nothing to compare
        else:
            verdict = judge(t.before, t.after, threshold)
        rows.append(Change("kernel", t.kernel.name, t.kernel.key, target.key, t.before, t.after, t.unit,
                           _ratio(t.before, t.after), verdict))
    for model in zoo.models:
        mine = [(t, occ) for t in timings for m, occ in t.kernel.models if m == model.name]
        compared = [(t, occ) for t, occ in mine if t.before is not None]
        if any(t.after is None for t, _ in mine):
            verdict, before, after = "regression", _total(compared, "before"), None
        elif not compared:
            verdict, before, after = "new", None, _total(mine, "after")
        else:
            before, after = _total(compared, "before"), _total(compared, "after")
            verdict = judge(before, after, threshold)
        rows.append(Change("model", model.name, model.name, target.key, before, after,
                           str(target.cost_unit), _ratio(before, after), verdict))
    if baseline is not None:
        zoo_keys = {t.kernel.key for t in timings}
        names = {w.key: w.name for w in baseline.workloads()}
        for w in sorted({r.workload_key for r in baseline.records(target_key=target.key)} - zoo_keys):
            best = baseline.best(w, target.key)
            rows.append(Change("kernel", names.get(w, w), w, target.key, best.cost if best else None, None,
                               str(target.cost_unit), None, "missing"))
    order = {v: i for i, v in enumerate(VERDICTS)}  # the report's order: regressions first
    return sorted(rows, key=lambda c: (order[c.verdict], c.kind != "model", c.name, c.key))


def _total(pairs, attr: str) -> float | None:
    values = [getattr(t, attr) for t, _ in pairs]
    if not values or any(v is None for v in values):
        return None
    return sum(occ * v for (_, occ), v in zip(pairs, values))


def _ratio(before: float | None, after: float | None) -> float | None:
    return after / before if before and after is not None else None


# --- artifacts -------------------------------------------------------------------------------


def export_night(run: Night) -> int:
    """Write the night's records as JSON lines (`Database.export_jsonl`'s format): the zoo
    kernels' records measured since `since`, plus, for each kernel, the record and the
    verdict that make its current choice (from earlier nights too), so that the file is
    tomorrow's baseline on its own; and the zoo's models. Returns the number of records."""
    from akg.db import InMemoryDatabase

    database, kernels, target_key, since = run.database, run.kernels, run.target.key, run.started
    keys = {k.key for k in kernels}
    night = InMemoryDatabase()
    for model in run.zoo.models:
        night.register_model(model.name, target_key, [(k.key, occ) for k in kernels for m, occ in k.models
                                                      if m == model.name])
    for w in database.workloads():
        if w.key in keys:
            night.register_workload(w)
    for t in database.targets():
        if t.key == target_key:
            night.register_target(t)
    records, verdicts = [], []
    for key in sorted(keys):
        records += [r for r in database.records(key, target_key) if r.timestamp >= since]
        verdicts += [v for v in database.verdicts(key, target_key) if v.timestamp >= since]
        choice = database.choice(key, target_key)
        if choice is not None and choice.record is not None:
            records.append(choice.record)
        if choice is not None and choice.verdict is not None and choice.verdict not in verdicts:
            verdicts.append(choice.verdict)
    night.add_many(sorted(records, key=lambda r: r.timestamp))
    for v in sorted(verdicts, key=lambda v: v.timestamp):
        night.add_verdict(v)
    return night.export_jsonl(run.out / RECORDS_FILE)


def find_baseline(given: Path | None, out: Path) -> tuple[Path | None, str]:
    """The baseline file and a line saying which it is (or why there is none): `given` as a
    file, else the newest records.jsonl in the folder `given` (default: the folder of `out`,
    where earlier nights' artifacts are), never one inside `out` itself."""
    folder = given if given is not None else out.parent
    if given is not None and given.is_file():
        return given, f"baseline: {given}"
    if given is not None and not given.exists():
        return None, f"no baseline: {given} does not exist (first night?): every kernel is new"
    found = [p for p in (*folder.glob(RECORDS_FILE), *folder.glob(f"*/{RECORDS_FILE}"))
             if p.is_file() and out.resolve() not in (p.parent.resolve(), *p.parent.resolve().parents)]
    if not found:
        return None, f"no baseline: no {RECORDS_FILE} in {folder} (first night?): every kernel is new"
    newest = max(found, key=lambda p: (p.stat().st_mtime, str(p)))
    return newest, f"baseline: {newest} (the newest in {folder})"


def write_reports(run: Night, changes: list, extra: dict) -> None:
    """report.json and report.html (`akg report`: tonight's records, and the rows of the
    same-run comparison as its changes), and its terminal summary."""
    import json

    from akg.errors import DatabaseError
    from akg.report import collect, load_baseline, print_summary, to_json, write_html

    try:
        baseline = load_baseline(run.baseline_path) if run.baseline_path is not None else None
    except DatabaseError:  # an export without records: named in the summary, not in the report
        baseline = None
    data = collect(run.database, since=run.started, target_key=run.target.key)
    options = {"baseline": baseline, "threshold": run.zoo.threshold}
    out = run.out
    report = to_json(data, changes, **options)
    report["nightly"] = extra
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    write_html(data, changes, out / "report.html", **options)
    print_summary(data, changes, **options)


def summary_lines(run: Night, changes: list, offenders: list) -> list[str]:
    """The plain-text summary (summary.txt, and the end of the log)."""
    lines = [f"akg nightly {run.started:%Y-%m-%d %H:%M} UTC on {run.target} ({run.target.key}); database {run.where}",
             run.baseline_line,
             f"threshold: {run.zoo.threshold:.0%} slower than the baseline in the same-run comparison"]
    for c in changes:
        if c.kind == "model":
            ratio = f" ({c.ratio:.2f}x)" if c.ratio is not None else ""
            lines.append(f"model {c.name}: {cost_text(c.before, c.unit)} -> {cost_text(c.after, c.unit)}{ratio} "
                         f"{c.verdict}")
    counts = {}
    for c in changes:
        if c.kind == "kernel":
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
    lines.append("kernels: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    if offenders:
        lines.append(f"REGRESSIONS ({len(offenders)}):")
        lines += [f"  {line}" for line in offenders]
    else:
        lines.append("no regressions")
    return lines


def offender_lines(changes: list, timings: list[Timing]) -> list[str]:
    """One line per regression: model or kernel (with the models it occurs in), before,
    after, ratio, and why when tonight's best did not run."""
    notes = {t.kernel.key: t for t in timings}
    lines = []
    for c in changes:
        if c.verdict != "regression":
            continue
        if c.kind == "model":
            lines.append(f"model {c.name}: {cost_text(c.before, c.unit)} -> {cost_text(c.after, c.unit)}"
                         + (f" ({c.ratio:.2f}x)" if c.ratio is not None else ""))
            continue
        t = notes.get(c.key)
        models = ", ".join(m for m, _ in t.kernel.models) if t else "?"
        why = f"; {t.note}" if t is not None and t.after is None else ""
        lines.append(f"kernel {c.name} (model {models}): {cost_text(c.before, c.unit)} -> "
                     f"{cost_text(c.after, c.unit)}" + (f" ({c.ratio:.2f}x)" if c.ratio is not None else "") + why)
    return lines


def cost_text(cost: float | None, unit) -> str:
    """A cost as the report writes it (`79.21 us`, `12,345 cycles`, `-`)."""
    from akg.report.units import format_cost

    return format_cost(cost, str(unit))


# --- the command -----------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--zoo", type=Path, default=DEFAULT_ZOO, help="the model zoo (default: scripts/nightly.toml)")
    p.add_argument("--db", default=None, help="tuning database URL or path (overrides the zoo's; default $AKG_DB, "
                                              "else ~/.cache/akg/tuning.db)")
    p.add_argument("--target", default=None, help="target name (overrides the zoo's)")
    p.add_argument("--baseline", type=Path, default=None,
                   help="the previous night's records.jsonl, or a folder holding nights' artifacts (the newest is "
                        "used); default: the folder of --out")
    p.add_argument("--out", type=Path, default=None, help="artifacts folder (default: nightly-artifacts/DATE)")
    p.add_argument("--threshold", type=float, default=None,
                   help="regression threshold, a fraction (overrides the zoo's)")
    p.add_argument("--rounds", type=int, default=None,
                   help="alternating rounds of each re-timing (overrides the zoo's)")
    p.add_argument("--timeout", type=float, default=None, help="seconds a candidate may run (overrides the zoo's)")
    p.add_argument("--trials", type=int, default=None, help="new trials per model tonight (overrides every model's)")
    p.add_argument("--no-tune", action="store_true", help="re-time and report only (tuning was done elsewhere)")
    p.add_argument("--workers", type=int, default=None, help="measure on N local Dask workers")
    p.add_argument("--scheduler", default=None, help="measure on the Dask cluster at this scheduler address")
    return p


def main(argv: list[str] | None = None, *, builder=None, runner=None) -> int:
    """Run the night; `builder`/`runner` replace the re-timing's LocalBuilder/LocalRunner
    (tests). Returns the exit code: 0, 1 (regressions), 3 (bad zoo or input), 6 (database),
    7 (Dask cluster), 130 (interrupted); docs/nightly.md lists them."""
    args = parser().parse_args(argv)
    try:
        return night(args, builder, runner)
    except AkgError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted: every measurement so far is in the database", file=sys.stderr)
        return EXIT_INTERRUPTED


@dataclass
class Night:
    """One run of the job: its settings, database, kernels and baseline."""

    zoo: Zoo
    target: object  # akg.target.Target
    database: object  # akg.db.Database
    where: str  # the database's name, password hidden
    started: datetime
    out: Path
    kernels: list[ZooKernel]
    baseline: object | None  # the baseline as an InMemoryDatabase
    baseline_path: Path | None
    baseline_line: str


def night(args, builder=None, runner=None) -> int:
    from akg.db import InMemoryDatabase, open_database
    from akg.target import get_target

    zoo = load_zoo(args.zoo)
    overrides = {"target": args.target, "db": args.db, "threshold": args.threshold, "rounds": args.rounds,
                 "timeout": args.timeout}
    zoo = check_settings(replace(zoo, **{k: v for k, v in overrides.items() if v is not None}), "command line")
    if args.trials is not None:
        if args.trials < 0:
            raise InputError(f"--trials must be >= 0, not {args.trials}")
        zoo = replace(zoo, models=tuple(replace(m, trials=args.trials) for m in zoo.models))
    farm = farm_options(args.workers, args.scheduler)
    started = datetime.now(timezone.utc)
    out = args.out if args.out is not None else DEFAULT_ARTIFACTS / f"{started:%Y-%m-%d}"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"cannot create the artifacts folder {out}: {e.strerror}") from None
    target = get_target(zoo.target)
    baseline_path, baseline_line = find_baseline(args.baseline, out)
    baseline = None
    if baseline_path is not None:
        baseline = InMemoryDatabase()
        baseline.import_jsonl(baseline_path)
        if baseline.count() and not baseline.count(target_key=target.key):
            baseline_line += (f"; it has no records on tonight's target {target.key} "
                              f"(only {', '.join(t.key for t in baseline.targets())}): every kernel is new")
    echo(baseline_line)
    with open_database(zoo.db) as database:
        where = getattr(database, "url", None) or repr(database)  # the URL with its password hidden
        echo(f"nightly on {target} ({target.key}), database {where}, artifacts {out}")
        graphs, kernels = zoo_kernels(zoo, target)
        run = Night(zoo, target, database, where, started, out, list(kernels.values()), baseline, baseline_path,
                    baseline_line)
        try:
            if not (args.no_tune or retune(zoo, graphs, kernels, target, database, farm)):
                raise KeyboardInterrupt
            timings = retime_all(run, builder, runner)
        except KeyboardInterrupt:
            count = export_night(run)
            echo(f"interrupted: every measurement so far is in the database; {count} records in "
                 f"{out / RECORDS_FILE}")
            return EXIT_INTERRUPTED
        return artifacts(run, timings)


def retime_all(run: Night, builder=None, runner=None) -> list[Timing]:
    """`retime` with the local builder and runner unless others are given (tests)."""
    from akg.tuner.builder import LocalBuilder
    from akg.tuner.runner import LocalRunner

    own_builder, own_runner = builder is None, runner is None
    builder = builder or LocalBuilder()
    runner = runner or LocalRunner(timeout=run.zoo.timeout)
    echo(f"re-timing {len(run.kernels)} kernel(s) against the baseline ({run.zoo.rounds} alternating rounds each)")
    try:
        return retime(run.kernels, run.target, run.database, run.baseline, builder, runner, run.zoo.rounds)
    finally:
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()


def artifacts(run: Night, timings: list[Timing]) -> int:
    """Judge the re-timings, write every artifact, print the summary; the exit code."""
    zoo, out = run.zoo, run.out
    changes = changes_of(zoo, timings, run.baseline, run.target, zoo.threshold)
    offenders = offender_lines(changes, timings)
    count = export_night(run)
    code = EXIT_REGRESSION if offenders else 0
    extra = {"started": run.started.isoformat(), "target": run.target.key, "database": run.where,
             "zoo": [{"name": m.name, "path": str(m.path), "trials": m.trials} for m in zoo.models],
             "baseline": str(run.baseline_path) if run.baseline_path else None, "threshold": zoo.threshold,
             "rounds": zoo.rounds, "offenders": offenders, "exit_code": code}
    write_reports(run, changes, extra)
    lines = summary_lines(run, changes, offenders)
    lines.append(f"{count} records of tonight in {out / RECORDS_FILE}; report {out / 'report.html'}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for line in lines:
        echo(line)
    return code


def echo(line: str) -> None:
    print(line, flush=True)  # a killed job keeps every line so far


if __name__ == "__main__":
    sys.exit(main())

"""The library API: `build` one kernel, `compile` (or `run`) a whole model given as a path of any
known format, a Graph or an in-memory model such as an `onnx.ModelProto`, `tune` a model; each
takes names or objects (a target name or Target, a database URL or Database) and turns them
into objects once, here at the edge. Tuned configs come from the tuning database."""

from __future__ import annotations

from akg.compiler import build as _build
from akg.compiler import compile_model as _compile_model
from akg.schedules.space import Config
from akg.target import Target, get_target


def _cost(cost: float | None, unit) -> str:
    if cost is None:
        return "-"
    return f"{cost * 1e6:.1f} us" if str(unit) == "s" else f"{cost:.0f} {unit}"


def tuned_config(graph, target: Target, db) -> tuple[Config | None, str]:
    """The config the tuning database chose for this workload on this target
    (`Database.choice`: the winner of the tuner's final comparison against the default, or
    the cheapest record of a database without one), and where it came from. None: the
    target's default (nothing tuned, or the default won the final comparison)."""
    from akg.db import Database, open_database
    from akg.graph.subgraph import workload_key

    database = db if isinstance(db, Database) else open_database(db)
    return chosen_config(database.choice(workload_key(graph), target.key))


def chosen_config(choice) -> tuple[Config | None, str]:
    """A database `Choice` (or None) as the config `akg compile` builds (None: the default)
    and the words that say where it came from (the CLI's `akg db ls/best` print them too)."""
    if choice is None:
        return None, "default"
    verdict = choice.verdict
    if verdict is None:
        best = choice.record
        return (Config.from_json(best.config),
                f"tuned ({_cost(best.cost, best.unit)} measured {best.timestamp:%Y-%m-%d}, unconfirmed)")
    tuned = verdict.contender("tuned")
    if choice.config is None and tuned is not None and tuned.is_default:
        return None, f"default (the tuned pick: {_cost(verdict.cost, verdict.unit)}, confirmed {verdict.timestamp:%Y-%m-%d})"
    if choice.config is None:
        return None, (f"default (kept: {_cost(verdict.cost, verdict.unit)} vs the tuned config's "
                      f"{_cost(tuned.cost if tuned else None, verdict.unit)} in the final comparison "
                      f"{verdict.timestamp:%Y-%m-%d})")
    default = next((c for c in verdict.contenders if c.is_default and c.config != verdict.config), None)
    versus = f" vs default {_cost(default.cost, verdict.unit)}" if default is not None else ""
    what = "tuned" if verdict.role == "tuned" else f"tuned, {verdict.role}"
    return Config.from_json(choice.config), (f"{what} ({_cost(verdict.cost, verdict.unit)}{versus}, confirmed "
                                             f"{verdict.timestamp:%Y-%m-%d})")


def _database(db):
    if db is None:
        return None
    from akg.db import Database, open_database

    return db if isinstance(db, Database) else open_database(db)


def _chooser(db):
    database = _database(db)
    if database is None:
        return None
    return lambda graph, target: tuned_config(graph, target, database)


def build(subgraph, target: str | Target = "cpu", config: Config | None = None, db=None):
    """Compile one subgraph into a Kernel: `config`, else the config the tuning database `db`
    chose for it when one is given and has one, else the target's default; the kernel says
    which. With `db`, a graph is built as the kernel `tune` tuned for it (`_as_tuned`)."""
    target = get_target(target)
    database = _database(db)
    if config is None and database is not None:
        subgraph = _as_tuned(subgraph, target, database)
    return _build(subgraph, target, config, choose=_chooser(database))


def _as_tuned(subgraph, target: Target, database):
    """`subgraph` as `tune` keyed it in `database`: `tune` plans a graph into kernels
    (`plan_model`: composite ops expanded, the graph simplified), so a softmax or a layer norm
    is tuned as a graph of basic ops under another workload key than its own. Where the
    database has nothing under the graph's own key and planning makes one kernel that takes
    and returns arrays of the same shapes and dtypes in the same order, that kernel is what is
    built (and found); else `subgraph` as given (a graph planned into several kernels is tuned
    kernel by kernel, which `compile` builds)."""
    from akg.graph.ir import Graph
    from akg.graph.pipeline import plan_model
    from akg.graph.subgraph import Subgraph, workload_key

    graph = subgraph.graph if isinstance(subgraph, Subgraph) else subgraph
    if not isinstance(graph, Graph) or database.choice(workload_key(graph), target.key) is not None:
        return subgraph
    kernels = plan_model(graph, target).kernels
    if len(kernels) != 1:
        return subgraph
    planned = kernels[0].subgraph.graph

    def signature(g):
        return ([(tuple(v.shape), str(v.dtype)) for v in g.inputs],
                [(tuple(v.shape), str(v.dtype)) for v in g.outputs])

    return planned if signature(planned) == signature(graph) else subgraph


def load(model):
    """The Graph of `model`: a Graph as it is, a Subgraph's graph, a path of any format
    `load_model` knows (`.mir`, `.onnx`, `.mindir`, composite JSON), or an in-memory model one
    of its frontends takes (an `onnx.ModelProto`, MindIR bytes, a composite-JSON dict)."""
    from akg.graph.io import load_model
    from akg.graph.subgraph import Subgraph

    return model.graph if isinstance(model, Subgraph) else load_model(model)


def compile(model, target: str | Target = "cpu", db=None, progress=None, example_inputs=None):  # noqa: A001
    """A CompiledModel of `model` (anything `load` takes) for `target`, each kernel with its
    best tuned config from `db` when there is one. `example_inputs`: those a torch.nn.Module
    (or a torch-level GraphModule) is traced with (docs/torch.md)."""
    if example_inputs is not None:
        from akg.graph.io.torch_fx import TorchModel

        model = TorchModel(model, tuple(example_inputs))
    return compile_model(load(model), target, db, progress)


def run(model, inputs=None, target: str | Target = "cpu", db=None) -> list:
    """Compile `model` (anything `load` takes) for `target` and run it once on `inputs` (a
    mapping of input name -> array, or the arrays in input order); the outputs, in order."""
    compiled = compile(model, target, db)
    if inputs is None:
        inputs = {}
    return compiled(**inputs) if hasattr(inputs, "keys") else compiled(*inputs)


def compile_model(graph, target: str | Target = "cpu", db=None, progress=None):
    """A CompiledModel of a whole model, each kernel with its best tuned config from `db` when
    there is one."""
    return _compile_model(graph, get_target(target), choose=_chooser(db), progress=progress)


def tune(model, target: str | Target = "cpu", trials: int = 64, db=None, **options):
    """Tune a model's kernels (`model`: anything `load` takes, or a Subgraph), recording every measurement in the database (akg.tuner.tune)."""
    from akg.graph.ir import Graph
    from akg.graph.subgraph import Subgraph
    from akg.tuner.tune import tune as _tune

    if not isinstance(model, (Graph, Subgraph)):
        model = load(model)  # a path of any format, or an in-memory model such as an onnx.ModelProto
    return _tune(model, target=target, trials=trials, db=db, **options)

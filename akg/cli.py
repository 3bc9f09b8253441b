"""The `akg` command line: turns strings into typed objects once, then calls the library."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from akg._version import __version__
from akg.errors import AkgError, InputDataError

console = Console(highlight=False)


def _say_error(message: str) -> None:
    """One plain line on stderr (no wrapping, no markup)."""
    click.echo(message, err=True)


def _human(n: float, unit: str = "") -> str:
    for suffix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{suffix}{unit}" if suffix else f"{n:g}{unit}"
        n /= 1000
    return f"{n:.3g}P{unit}"


def checksum(a: np.ndarray) -> str:
    """A short content hash: equal arrays (shape, dtype and bytes) give equal checksums."""
    h = hashlib.sha256(f"{a.dtype}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="akg")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
def cli(debug: bool) -> None:
    """akg: automatic operator generator and kernel autotuner."""


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--fusion", is_flag=True, help="Print the fusion partition: kernels, their ops, inputs, "
              "outputs and why neighbouring kernels were cut.")
@click.option("--target", default="cpu", show_default=True,
              help="With --fusion: cut the kernels as they are compiled for this target.")
def show(model: Path, fusion: bool, target: str) -> None:
    """Print a model's ops, shapes, parameter count and FLOPs estimate."""
    from akg.graph.io import load_model
    from akg.graph.stats import graph_stats, node_flops

    graph = load_model(model)
    if fusion:
        from akg.graph.fuse import emit_partition
        from akg.graph.pipeline import plan_model
        from akg.target import get_target

        click.echo(emit_partition(plan_model(graph, get_target(target))), nl=False)
        return
    table = Table(title=f"graph @{graph.name}", show_lines=False)
    for col, justify in (("value", "left"), ("op", "left"), ("inputs", "left"),
                         ("type", "left"), ("FLOPs", "right")):
        table.add_column(col, justify=justify)
    for v in graph.inputs:
        table.add_row(f"%{v.name}", "input", "", str(v.type), "")
    for node in graph.nodes:
        table.add_row(", ".join(f"%{v.name}" for v in node.outputs), node.op,
                      ", ".join(f"%{v.name}" for v in node.inputs),
                      ", ".join(str(v.type) for v in node.outputs), _human(node_flops(node)))
    console.print(table)
    s = graph_stats(graph)
    console.print(f"outputs: {', '.join(f'%{v.name}: {v.type}' for v in graph.outputs)}")
    console.print(f"nodes: {s.nodes}  ({', '.join(f'{op} x{n}' for op, n in s.op_counts.items())})")
    console.print(f"parameters: {s.parameters:,} ({_human(s.parameter_bytes, 'B')}) in {len(graph.constants)} constants")
    console.print(f"FLOPs: {s.flops:,} ({_human(s.flops)})")


TARGET_HELP = "Compile for this target (cpu). Without it, `run` uses the reference interpreter."


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path),
              help="An .npz with one array per graph input, keyed by input name.")
@click.option("--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the outputs to this .npz (keys: the output value names).")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs used when --inputs is absent.")
@click.option("--target", default=None, help=TARGET_HELP)
@click.option("--check", is_flag=True, help="With --target: compare with the reference interpreter.")
def run(model: Path, inputs_path: Path | None, output_path: Path | None, seed: int,
        target: str | None, check: bool) -> None:
    """Run a model, kernel or .akgpack and print output shapes and checksums."""
    from akg.graph.interpreter import evaluate, random_inputs

    if model.suffix == ".akgpack":
        from akg.runtime import CompiledModel

        compiled = CompiledModel.load(model)
        inputs = _inputs(inputs_path, lambda: compiled.random_inputs(seed), seed)
        outputs = compiled(**inputs)
        _print_outputs(compiled.name, [(s.name, s.shape, s.dtype) for s in compiled.outputs], outputs,
                       f"akgpack, {len(compiled.calls)} kernels")
        _save_outputs(output_path, [s.name for s in compiled.outputs], outputs)
        return
    from akg.graph.io import load_model

    graph = load_model(model)
    inputs = _inputs(inputs_path, lambda: random_inputs(graph, seed), seed)
    if target is None:
        outputs, how = evaluate(graph, inputs), "reference interpreter"
    else:
        from akg.graph.interpreter import bind_inputs
        from akg.target import get_target

        bind_inputs(graph, inputs)  # typed errors for missing or mis-shaped inputs
        if _is_kernel_file(model):
            import akg

            kernel = akg.build(graph, target=get_target(target))
            outputs, how = kernel(**inputs), f"akg kernel, {kernel.target}, {kernel.config_source} config"
        else:
            from akg.api import compile_model

            compiled = compile_model(graph, get_target(target))
            outputs, how = compiled(**inputs), f"akg, {len(compiled.calls)} kernels on {get_target(target)}"
    _print_outputs(graph.name, [(v.name, v.shape, v.dtype) for v in graph.outputs], outputs, how)
    if check and target is not None:
        expected = evaluate(graph, inputs)
        worst = max((_max_error(a, e) for a, e in zip(outputs, expected)), default=0.0)
        console.print(f"max error vs reference: {worst:.3g}")
    _save_outputs(output_path, [v.name for v in graph.outputs], outputs)


def _is_kernel_file(path: Path) -> bool:
    """AKG composite JSON files hold one fused kernel; other formats hold models."""
    return path.suffix.lower() in (".json", ".info")


def _inputs(path: Path | None, make_random, seed: int) -> dict[str, np.ndarray]:
    if path is None:
        console.print(f"inputs: random (seed {seed})")
        return make_random()
    console.print(f"inputs: {path}")
    return _read_npz(path)


def _print_outputs(name: str, specs, outputs, how: str) -> None:
    from akg.graph.types import TensorType

    table = Table(title=f"outputs of @{name} ({how})")
    for col in ("output", "type", "sum", "mean |x|", "checksum"):
        table.add_column(col)
    for (out, shape, dtype), a in zip(specs, outputs):
        table.add_row(f"%{out}", str(TensorType(shape, dtype)), f"{a.astype(np.float64).sum():.6g}",
                      f"{np.abs(a.astype(np.float64)).mean() if a.size else 0:.6g}", checksum(a))
    console.print(table)


def _save_outputs(path: Path | None, names, outputs) -> None:
    if path is not None:
        np.savez(path, **dict(zip(names, outputs)))
        console.print(f"wrote {path}")


def _max_error(a: np.ndarray, e: np.ndarray) -> float:
    if a.size == 0:
        return 0.0
    if a.dtype.kind != "f":
        return float((a != e).sum())
    return float(np.nanmax(np.abs(a.astype(np.float64) - e.astype(np.float64))))


@cli.command("compile")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", default="cpu", show_default=True, help="Target to compile for.")
@click.option("--show-source", is_flag=True, help="Print the kernel's TIR.")
@click.option("--asm", "show_asm", is_flag=True, help="Print the generated assembly.")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path),
              help="Model: the .akgpack to write. Kernel file: a folder for kernel.tir, kernel.s, kernel.so.")
@click.option("--db", "db_url", default=None, help="Tuning database to take the best config from "
              "(default: $AKG_DB, else ~/.cache/akg/tuning.db).")
def compile_cmd(model: Path, target: str, show_source: bool, show_asm: bool, out_dir: Path | None,
                db_url: str | None) -> None:
    """Compile a model into kernels (-o model.akgpack saves them with their memory plan and
    weights), or one kernel file (composite JSON), taking each kernel's best tuned config from
    the database, else the default config, and saying which."""
    from akg.db import open_database
    from akg.graph.io import load_model
    from akg.target import get_target

    graph = load_model(model)
    database = open_database(db_url)
    if not _is_kernel_file(model) or (out_dir is not None and out_dir.suffix == ".akgpack"):
        from akg.api import compile_model

        compiled = compile_model(graph, get_target(target), db=database)
        table = Table(title=f"{compiled.name}: {len(compiled.calls)} kernels "
                            f"({len(compiled.kernels)} distinct) for {get_target(target)}")
        for col in ("kernel", "inputs", "outputs", "config"):
            table.add_column(col)
        for call in compiled.calls:
            table.add_row(call.name, ", ".join(call.inputs), ", ".join(call.outputs),
                          compiled.kernels[call.kernel].source)
        console.print(table)
        plan = compiled.plan
        console.print(f"memory plan: peak {_human(plan.peak_bytes, 'B')} of intermediates, "
                      f"{_human(plan.naive_bytes, 'B')} without reuse; compiled in {compiled.stats['compile_s']:.1f}s")
        if out_dir is not None:
            target_path = out_dir if out_dir.suffix == ".akgpack" else out_dir.with_suffix(".akgpack")
            compiled.save(target_path)
            console.print(f"wrote {target_path}")
        return
    import akg

    kernel = akg.build(graph, target=get_target(target), db=database)
    s = kernel.stats
    console.print(f"kernel {kernel.name} for {kernel.target}: {kernel.config_source} config "
                  f"{kernel.config.to_json()}")
    console.print(f"{s.statements} statements; lower {s.lower_s:.3f}s, schedule {s.schedule_s:.3f}s, "
                  f"codegen {s.codegen_s:.3f}s, compile {s.compile_s:.3f}s"
                  + (f"; schedule fallback: {s.fallback}" if s.fallback else ""))
    if show_source:
        click.echo(kernel.tir())
    if show_asm:
        click.echo(kernel.source("asm"))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "kernel.tir").write_text(kernel.tir())
        (out_dir / "kernel.s").write_text(kernel.source("asm"))
        artifact = kernel.target.backend().export(kernel.executable)
        (out_dir / f"kernel.{artifact.kind}").write_bytes(artifact.data)
        console.print(f"wrote {out_dir}/kernel.tir, kernel.s, kernel.{artifact.kind}")


@cli.command("grad")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--loss", required=True, help="Name of the scalar value to differentiate.")
@click.option("--wrt", default="params", show_default=True,
              help="Comma list of value names, or 'params': every trainable float constant.")
@click.option("--optimizer", default=None, help="sgd or adam: write a full training step instead.")
@click.option("--lr", type=float, default=None, help="Learning rate (sgd 0.01, adam 0.001).")
@click.option("--momentum", type=float, default=None, help="SGD momentum (default 0).")
@click.option("--betas", default=None, help="Adam's beta1,beta2 (default 0.9,0.999).")
@click.option("--eps", type=float, default=None, help="Adam's epsilon (default 1e-8).")
@click.option("-o", "--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The .mir to write; weights go in an .npz beside it.")
def grad(model: Path, loss: str, wrt: str, optimizer: str | None, lr: float | None, momentum: float | None,
         betas: str | None, eps: float | None, output_path: Path) -> None:
    """Differentiate a model: a graph of the loss and its gradients, or with --optimizer one
    training step (parameters and optimizer state in, loss and their next values out)."""
    from akg.graph.autodiff import grad as grad_graph
    from akg.graph.io import emit_mir, load_model, save_mir
    from akg.graph.train import initial_state, state_names, train_step

    settings = {"lr": lr, "momentum": momentum, "betas": betas, "eps": eps}
    if optimizer is None and any(v is not None for v in settings.values()):
        given = next(k for k, v in settings.items() if v is not None)
        raise click.UsageError(f"--{given} needs --optimizer")
    if betas is not None:
        try:
            settings["betas"] = tuple(float(b) for b in betas.split(","))
        except ValueError:
            raise click.BadParameter(f"expected two numbers like 0.9,0.999, got {betas!r}",
                                     param_hint="--betas") from None
        if len(settings["betas"]) != 2:
            raise click.BadParameter(f"expected two numbers like 0.9,0.999, got {betas!r}", param_hint="--betas")
    names = None if wrt.strip() == "params" else [n.strip().lstrip("%") for n in wrt.split(",") if n.strip()]
    loss = loss.lstrip("%")
    graph = load_model(model)
    if optimizer is None:
        result = grad_graph(graph, loss, names)
        save_mir(result, output_path)
        console.print(f"wrote {output_path}: outputs %{loss} and {len(result.outputs) - 1} gradient(s)")
        for v in result.outputs[1:]:
            console.print(f"  %{v.name}: {v.type}")
    else:
        result = train_step(graph, loss, names, optimizer, **settings)
        save_mir(result, output_path)
        init = output_path.with_suffix(".init.npz")
        state = initial_state(graph, result)
        np.savez(init, **state)
        data = [v.name for v in result.inputs if v.name not in state]
        console.print(f"wrote {output_path}: one {optimizer} step; inputs {', '.join(data)} (data) "
                      f"and {len(state_names(result))} state value(s), whose next values are the "
                      f"outputs new.<name>")
        console.print(f"wrote {init}: the initial state (parameters and zero optimizer state)")
    if emit_mir(result, weights_file=output_path.with_suffix(".npz").name)[1]:
        console.print(f"weights: {output_path.with_suffix('.npz')}")


@cli.command("convert")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The .mir to write; large weights go in an .npz beside it.")
def convert(model: Path, output_path: Path) -> None:
    """Write a model (.mindir, composite JSON, .mir) in akg's .mir text form."""
    from akg.graph.io import emit_mir, load_model, save_mir

    if output_path.suffix.lower() != ".mir":
        raise click.BadParameter(f"must end in .mir, got {str(output_path)!r}", param_hint="-o")
    graph = load_model(model)
    save_mir(graph, output_path)
    console.print(f"wrote {output_path}: @{graph.name}, {len(graph.nodes)} nodes, "
                  f"{len(graph.inputs)} inputs, {len(graph.outputs)} outputs")
    if emit_mir(graph, weights_file=output_path.with_suffix(".npz").name)[1]:
        console.print(f"weights: {output_path.with_suffix('.npz')}")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise InputDataError(f"{path}: no such file") from None
    except Exception as e:
        raise InputDataError(f"{path}: cannot read as .npz: {e}") from None


def _register_commands() -> None:
    from akg.cli_tuning import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)


_register_commands()


def main(argv: list[str] | None = None) -> int:
    """Entry point: AkgErrors become one line on stderr and the error's exit code."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or os.environ.get("AKG_DEBUG") == "1"
    if "--debug" in argv:  # accepted anywhere on the line, not only before the command
        argv = ["--debug", *(a for a in argv if a != "--debug")]
    try:
        cli.main(args=argv, prog_name="akg", standalone_mode=False)
    except click.exceptions.Abort:
        _say_error("interrupted")
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except AkgError as e:
        if debug:
            raise
        _say_error(f"error: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        _say_error("interrupted")
        return 130
    except Exception as e:  # a bug in akg, not in the user's input
        if debug:
            raise
        _say_error(f"internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)")
        return 70
    return 0


if __name__ == "__main__":
    sys.exit(main())

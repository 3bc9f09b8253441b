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
def show(model: Path) -> None:
    """Print a model's ops, shapes, parameter count and FLOPs estimate."""
    from akg.graph.io import load_model
    from akg.graph.stats import graph_stats, node_flops

    graph = load_model(model)
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


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path),
              help="An .npz with one array per graph input, keyed by input name.")
@click.option("--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the outputs to this .npz (keys: the output value names).")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs used when --inputs is absent.")
def run(model: Path, inputs_path: Path | None, output_path: Path | None, seed: int) -> None:
    """Run a model with the reference interpreter and print output shapes and checksums."""
    from akg.graph.interpreter import evaluate, random_inputs
    from akg.graph.io import load_model

    graph = load_model(model)
    if inputs_path is None:
        inputs = random_inputs(graph, seed)
        console.print(f"inputs: random (seed {seed})")
    else:
        inputs = _read_npz(inputs_path)
        console.print(f"inputs: {inputs_path}")
    outputs = evaluate(graph, inputs)
    table = Table(title=f"outputs of @{graph.name} (reference interpreter)")
    for col in ("output", "type", "sum", "mean |x|", "checksum"):
        table.add_column(col)
    for v, a in zip(graph.outputs, outputs):
        table.add_row(f"%{v.name}", str(v.type), f"{a.astype(np.float64).sum():.6g}",
                      f"{np.abs(a.astype(np.float64)).mean() if a.size else 0:.6g}", checksum(a))
    console.print(table)
    if output_path is not None:
        np.savez(output_path, **{v.name: a for v, a in zip(graph.outputs, outputs)})
        console.print(f"wrote {output_path}")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise InputDataError(f"{path}: no such file") from None
    except Exception as e:
        raise InputDataError(f"{path}: cannot read as .npz: {e}") from None


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

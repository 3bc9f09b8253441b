"""The `akg` command line: turns strings into typed objects once, then calls the library."""

from __future__ import annotations

import hashlib
import math
import os
import sys
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from akg._version import __version__
from akg.errors import AkgError, InputDataError, InputError, OutputPathError, ResourceError, VerificationError, one_line

console = Console(highlight=False, soft_wrap=True)  # lines are not wrapped or cut at 80 columns in logs


def print_table(table: Table) -> None:
    """Print a table whole: in a terminal long cells fold onto more lines; elsewhere (a pipe,
    a CI log) the table takes the width it needs instead of being cut at 80 columns."""
    if console.is_terminal:
        for column in table.columns:
            column.overflow = "fold"
        console.print(table)
    else:
        Console(highlight=False, width=100_000).print(table)


class Finite(click.ParamType):
    """A finite float (no nan, no inf) within [min, max] (`min_open`: above min)."""

    name = "float"

    def __init__(self, min: float | None = None, max: float | None = None, min_open: bool = False,
                 max_open: bool = False):
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            v = value
        else:
            try:
                v = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number.", param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        low_bad = self.min is not None and (v <= self.min if self.min_open else v < self.min)
        high_bad = self.max is not None and (v >= self.max if self.max_open else v > self.max)
        if low_bad or high_bad:
            self.fail(f"{value} is not in the range {self._range()}.", param, ctx)
        return v

    def _range(self) -> str:
        if self.max is None:
            return f"x{'>' if self.min_open else '>='}{self.min:g}"
        if self.min is None:
            return f"x{'<' if self.max_open else '<='}{self.max:g}"
        return f"{'(' if self.min_open else '['}{self.min:g}, {self.max:g}{')' if self.max_open else ']'}"

    def get_metavar(self, param, *args, **kwargs) -> str:  # click 8.2+ passes ctx=
        return "FLOAT"


SEED = click.IntRange(0, 2**32 - 1)  # NumPy's and XGBoost's seeds are unsigned 32-bit
DB_HELP = "Tuning database: an SQLAlchemy URL or an SQLite file path (default: $AKG_DB, else ~/.cache/akg/tuning.db)."


def _say_error(message: str) -> None:
    """One plain line on stderr (no wrapping, no markup)."""
    click.echo(message, err=True)


def _human(n: float, unit: str = "") -> str:
    for suffix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{suffix}{unit}" if suffix else f"{n:g}{unit}"
        n /= 1000
    return f"{n:.3g}P{unit}"


def writable(path: Path, *, folder: bool = False) -> Path:
    """Check, before any work, that `path` (a file, or with `folder` a directory) can be
    written: folders missing on the way are created when it is written (`make_parent`); a
    file in the way, a folder given for a file, or an unwritable folder is an
    OutputPathError now."""
    path = Path(path)
    if not folder and path.is_dir():
        raise OutputPathError(f"{path}: is a folder, not a file name")
    if folder and path.exists() and not path.is_dir():
        raise OutputPathError(f"{path}: exists and is not a folder")
    ancestor = path if folder else path.parent
    ancestor = Path(os.path.abspath(ancestor))
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(f"{path}: cannot create a folder under {ancestor}: it is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(f"{path}: folder {ancestor} is not writable")
    return path


def make_parent(path: Path, *, folder: bool = False) -> Path:
    """Create the folders `path` needs (all of `path` with `folder`); OutputPathError on failure."""
    try:
        (Path(path) if folder else Path(path).parent).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{path}: cannot create its folder: {e.strerror or e}") from None
    return path


def _write_error(path: Path, e: OSError) -> OutputPathError:
    return OutputPathError(f"{path}: cannot write: {e.strerror or e}")


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

        click.echo(emit_partition(plan_model(graph, get_target(target)), graph), nl=False)
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
    print_table(table)
    s = graph_stats(graph)
    console.print(f"outputs: {', '.join(f'%{v.name}: {v.type}' for v in graph.outputs)}")
    console.print(f"nodes: {s.nodes}  ({', '.join(f'{op} x{n}' for op, n in s.op_counts.items())})")
    console.print(f"parameters: {s.parameters:,} ({_human(s.parameter_bytes, 'B')}) in {len(graph.constants)} constants")
    console.print(f"FLOPs: {s.flops:,} ({_human(s.flops)})")


TARGET_HELP = "Compile for this target (cpu). Without it, `run` uses the reference interpreter."


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--inputs", "inputs_paths", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="An .npz of arrays keyed by graph input name. Repeat it to merge several files (a training "
                   "step's STEP.init.npz and a data .npz): a name in two files, or one the model does not "
                   "take, is an error.")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the outputs to this .npz (keys: the output value names); missing folders are created.")
@click.option("--seed", default=0, show_default=True, type=SEED,
              help="Seed of the random inputs used when --inputs is absent.")
@click.option("--target", default=None, help=TARGET_HELP)
@click.option("--check", is_flag=True, help="Compare each output with the reference interpreter (needs --target, "
              "or an .akgpack) and print a pass/fail verdict per output; exit 5 if one fails.")
@click.option("--rtol", type=Finite(0.0), default=None,
              help="With --check: relative tolerance (default by dtype: f16 1e-2, bf16 2e-2, f32 1e-4, f64 1e-9).")
@click.option("--atol", type=Finite(0.0), default=None,
              help="With --check: absolute tolerance (default by dtype: f16 1e-3, bf16 1e-2, f32 1e-5, f64 1e-12).")
@click.option("--mesh", default=None, help="With --processes: the device mesh, e.g. dp=2,tp=2 (default dp=N).")
@click.option("--processes", type=click.IntRange(min=1), default=None,
              help="Run the model split over this many local processes (torch.distributed, gloo), as the "
                   "parallel search plans it for --mesh (data parallel without a search); --target defaults to cpu.")
def run(model: Path, inputs_paths: tuple[Path, ...], output_path: Path | None, seed: int,
        target: str | None, check: bool, rtol: float | None, atol: float | None, mesh: str | None,
        processes: int | None) -> None:
    """Run a model, kernel or .akgpack and print output shapes and checksums."""
    from akg.graph.interpreter import evaluate, random_inputs

    pack = model.suffix == ".akgpack"
    if not check and (rtol is not None or atol is not None):
        raise click.UsageError(f"--{'rtol' if rtol is not None else 'atol'} needs --check")
    if pack and target is not None:
        raise click.UsageError("an .akgpack is compiled already: drop --target")
    if mesh is not None and processes is None:
        raise click.UsageError("--mesh needs --processes N")
    if processes is not None:
        if pack or _is_kernel_file(model):
            raise click.UsageError("--processes runs a model file (.mir, .onnx, ...), not a kernel or an .akgpack")
        return _run_processes(model, inputs_paths, output_path, seed, target or "cpu", check, rtol, atol,
                              mesh, processes)
    if check and not pack and target is None:
        raise click.UsageError("--check compares a compiled run with the reference interpreter: add --target "
                               "(e.g. --target cpu)")
    if output_path is not None:
        writable(output_path)
    if pack:
        from akg.runtime import CompiledModel

        compiled = CompiledModel.load(model)
        reference = None
        if check:
            try:
                reference = compiled.reference_graph()
            except InputError as e:
                raise type(e)(f"--check cannot run: {e}; check the model itself instead: "
                              f"akg run MODEL --target TARGET --check") from None
        names = [s.name for s in compiled.outputs]
        inputs = _inputs(inputs_paths, [s.name for s in compiled.inputs], lambda: compiled.random_inputs(seed), seed)
        outputs = compiled(**inputs)
        _print_outputs(compiled.name, [(s.name, s.shape, s.dtype) for s in compiled.outputs], outputs,
                       f"akgpack, {len(compiled.calls)} kernels")
        _save_outputs(output_path, names, outputs)
        if check:
            _check(reference, names, outputs, inputs, rtol, atol, random=not inputs_paths)
        return
    from akg.graph.io import load_model

    graph = load_model(model)
    inputs = _inputs(inputs_paths, [v.name for v in graph.inputs], lambda: random_inputs(graph, seed), seed)
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
    names = [v.name for v in graph.outputs]
    _print_outputs(graph.name, [(v.name, v.shape, v.dtype) for v in graph.outputs], outputs, how)
    _save_outputs(output_path, names, outputs)
    if check:
        _check(graph, names, outputs, inputs, rtol, atol, random=not inputs_paths)


def _run_processes(model: Path, inputs_paths, output_path, seed: int, target: str, check: bool, rtol, atol,
                   mesh_text: str | None, processes: int) -> None:
    """`akg run MODEL --processes N [--mesh ...]`: the model split over N local processes."""
    from akg.distributed import plan_for, run_distributed
    from akg.graph.interpreter import random_inputs
    from akg.graph.io import load_model
    from akg.graph.parallel.mesh import Mesh
    from akg.target import get_target

    mesh = Mesh.parse(mesh_text or f"dp={processes}")
    if mesh.size != processes:
        raise click.UsageError(f"mesh {mesh} has {mesh.size} devices, --processes is {processes}")
    if output_path is not None:
        writable(output_path)
    graph = load_model(model)
    inputs = _inputs(inputs_paths, [v.name for v in graph.inputs], lambda: random_inputs(graph, seed), seed)
    get_target(target)  # an unknown target stops here, not in every process
    plan, how = plan_for(graph, mesh)
    if plan.stages is not None and len(plan.stages) > 1:
        how += f", {len(plan.stages)} stages"
        if getattr(plan, "microbatches", 1) > 1:
            click.echo(f"note: the plan streams {plan.microbatches} microbatches per step through its stages "
                       f"(1F1B); the inputs are one batch, run as one microbatch")
    result = run_distributed(graph, plan, inputs, target=target)
    moved = ", ".join(f"{op} x{n}" for op, n in sorted(result.collectives.items())) or "no collectives"
    _print_outputs(graph.name, [(v.name, v.shape, v.dtype) for v in graph.outputs], result.outputs,
                   f"akg on {processes} processes, mesh {mesh}, {how}; per rank: {moved}")
    click.echo(f"step {result.step_s[-1] * 1e3:.2f} ms (slowest rank), compile {result.compile_s:.1f} s")
    _save_outputs(output_path, result.names, result.outputs)
    if check:
        _check(graph, result.names, result.outputs, inputs, rtol, atol, random=not inputs_paths)


def _check(graph, names, outputs, inputs, rtol, atol, random: bool) -> None:
    """Compare `outputs` (named `names`) with the reference interpreter on `graph`: one verdict
    line per output, an overall one, and VerificationError (exit 5) when one fails."""
    from akg.verify import Reference, check_outputs

    by_name = dict(zip(names, outputs))
    ref_names = [v.name for v in graph.outputs]
    if set(ref_names) != set(names):
        raise InputError(f"--check cannot run: the reference graph's outputs ({', '.join(ref_names)}) are not "
                         f"the compiled model's ({', '.join(names)})")
    ref_inputs = {v.name: inputs[v.name] for v in graph.inputs if v.name in inputs}
    checks = check_outputs(ref_names, [by_name[n] for n in ref_names], Reference.of(graph, ref_inputs), rtol, atol)
    for c in checks:
        click.echo(f"check {c}")
    failed = [c for c in checks if not c.ok]
    nan_both = [c for c in checks if c.nan_both]
    if nan_both:
        hint = ("; the inputs are random: random values are often outside a model's domain, pass real ones with "
                "--inputs (e.g. a training step's STEP.init.npz and a data .npz)" if random else "")
        click.echo(f"note: {len(nan_both)} output(s) hold NaNs that the reference has too: those elements could "
                   f"not be checked{hint}")
    if failed:
        raise VerificationError(f"check failed: {len(failed)} of {len(checks)} output(s) differ from the reference "
                                f"interpreter: {', '.join('%' + c.output for c in failed)}")
    click.echo(f"check passed: {len(checks)} output(s) match the reference interpreter")


def _is_kernel_file(path: Path) -> bool:
    """AKG composite JSON files hold one fused kernel; other formats hold models."""
    return path.suffix.lower() in (".json", ".info")


def _inputs(paths: tuple[Path, ...], names: list[str], make_random, seed: int) -> dict[str, np.ndarray]:
    """The arrays of every --inputs file merged (a name in two files, or one the model does not
    take, is an InputDataError), else random ones."""
    if not paths:
        console.print(f"inputs: random (seed {seed})")
        return make_random()
    seen: dict[Path, Path] = {}
    merged: dict[str, np.ndarray] = {}
    where: dict[str, Path] = {}
    for path in paths:
        key = Path(os.path.abspath(path))
        if key in seen:
            raise click.BadParameter(f"{path} is given twice", param_hint="--inputs")
        seen[key] = path
        for name, a in _read_npz(path).items():
            if name in where:
                raise InputDataError(f"input {name} is in both {where[name]} and {path}: give each input once")
            merged[name], where[name] = a, path
    unknown = [n for n in merged if n not in names]
    if unknown:
        raise InputDataError(f"unknown input(s) {', '.join(f'{n} (in {where[n]})' for n in unknown)}; the model "
                             f"takes {', '.join(names) or 'none'}")
    missing = [n for n in names if n not in merged]
    if missing:
        raise InputDataError(f"missing input(s): {', '.join(missing)} (in none of {', '.join(map(str, paths))})")
    console.print(f"inputs: {' + '.join(map(str, paths))}")
    return merged


def _print_outputs(name: str, specs, outputs, how: str) -> None:
    from akg.graph.types import TensorType

    table = Table(title=f"outputs of @{name} ({how})")
    for col in ("output", "type", "sum", "mean |x|", "checksum"):
        table.add_column(col)
    for (out, shape, dtype), a in zip(specs, outputs):
        table.add_row(f"%{out}", str(TensorType(shape, dtype)), f"{a.astype(np.float64).sum():.6g}",
                      f"{np.abs(a.astype(np.float64)).mean() if a.size else 0:.6g}", checksum(a))
    print_table(table)


def _save_outputs(path: Path | None, names, outputs) -> None:
    if path is not None:
        make_parent(path)
        written = path if path.suffix == ".npz" else path.with_name(path.name + ".npz")  # as np.savez names it
        from akg.graph.types import is_storage

        widened = [n for n, a in zip(names, outputs) if is_storage(str(a.dtype))]
        try:  # .npz has no bfloat16 or float8: NumPy would write raw bytes (|V2), losing the type
            np.savez(written, **{n: a.astype(np.float32) if n in widened else a for n, a in zip(names, outputs)})
        except OSError as e:
            raise _write_error(written, e) from None
        click.echo(f"wrote {written}" + (f" ({', '.join(widened)} as float32, exactly: .npz has no "
                                         f"{outputs[names.index(widened[0])].dtype})" if widened else ""))


@cli.command("compile")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", default="cpu", show_default=True, help="Target to compile for.")
@click.option("--show-source", is_flag=True, help="Print the source of the kernel (of each distinct kernel of a model): "
              "the target's generated source where it has one (a GPU kernel's C), else the TIR.")
@click.option("--asm", "show_asm", is_flag=True, help="Print the generated assembly (of each distinct kernel of a model).")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path),
              help="Model: the .akgpack to write. Kernel file: a folder for kernel.tir, kernel.s, kernel.so. "
                   "Missing folders are created.")
@click.option("--db", "db_url", default=None, help="Tuning database to take the best config from "
              "(default: $AKG_DB, else ~/.cache/akg/tuning.db).")
@click.option("--reference/--no-reference", default=True, show_default=True,
              help="Keep a copy of the model's graph in the .akgpack, for `akg run PACK --check` "
                   "(its weights are stored a second time).")
def compile_cmd(model: Path, target: str, show_source: bool, show_asm: bool, out_dir: Path | None,
                db_url: str | None, reference: bool) -> None:
    """Compile a model into kernels (-o model.akgpack saves them with their memory plan and
    weights), or one kernel file (composite JSON), taking each kernel's best tuned config from
    the database, else the default config, and saying which."""
    from akg.db import open_database
    from akg.graph.io import load_model
    from akg.target import get_target

    as_pack = not _is_kernel_file(model) or (out_dir is not None and out_dir.suffix == ".akgpack")
    target_path = None
    if out_dir is not None:  # checked before compiling, not after
        if as_pack and (out_dir.is_dir() or out_dir.suffix not in ("", ".akgpack")):
            what = "is a folder" if out_dir.is_dir() else f"ends in {out_dir.suffix}"
            raise click.BadParameter(f"{out_dir} {what}: a model compiles into one .akgpack file "
                                     f"(-o {out_dir.with_suffix('.akgpack').name})", param_hint="-o")
        target_path = out_dir if out_dir.suffix == ".akgpack" or not as_pack else out_dir.with_suffix(".akgpack")
        writable(target_path, folder=not as_pack)
    graph = load_model(model)
    database = open_database(db_url)
    if as_pack:
        from akg.api import compile_model

        compiled = compile_model(graph, get_target(target), db=database)
        table = Table(title=f"{compiled.name}: {len(compiled.calls)} kernels "
                            f"({len(compiled.kernels)} distinct) for {get_target(target)}")
        for col in ("kernel", "inputs", "outputs", "config"):
            table.add_column(col)
        for call in compiled.calls:
            table.add_row(call.name, ", ".join(call.inputs), ", ".join(call.outputs),
                          compiled.kernels[call.kernel].source)
        print_table(table)
        plan = compiled.plan
        console.print(f"memory plan: peak {_human(plan.peak_bytes, 'B')} of intermediates, "
                      f"{_human(plan.naive_bytes, 'B')} without reuse; compiled in {compiled.stats['compile_s']:.1f}s")
        if show_source or show_asm:
            _echo_kernel_sources(compiled, show_source, show_asm)
        if target_path is not None:
            if reference:
                compiled.reference = graph
            make_parent(target_path)
            try:
                compiled.save(target_path)
            except OSError as e:
                raise _write_error(target_path, e) from None
            click.echo(f"wrote {target_path}" + ("" if reference else " (without the model's graph: "
                                                                      "`akg run` cannot --check it)"))
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
        click.echo(_generated_source(kernel.target.backend(), kernel.executable) or kernel.tir())
    if show_asm:
        click.echo(kernel.source("asm"))
    if out_dir is not None:
        make_parent(out_dir, folder=True)
        artifact = kernel.target.backend().export(kernel.executable)
        try:
            (out_dir / "kernel.tir").write_text(kernel.tir())
            (out_dir / "kernel.s").write_text(kernel.source("asm"))
            (out_dir / f"kernel.{artifact.kind}").write_bytes(artifact.data)
        except OSError as e:
            raise _write_error(out_dir, e) from None
        console.print(f"wrote {out_dir}/kernel.tir, kernel.s, kernel.{artifact.kind}")


def _generated_source(backend, executable) -> str:
    """The kernel's generated source where its backend has one (`Backend.source_kind`), else ""."""
    return backend.source(executable, backend.source_kind) if backend.source_kind else ""


def _echo_kernel_sources(compiled, tir: bool, asm: bool) -> None:
    """Each distinct kernel of a compiled model, under the name of its first call: its TIR and/or
    the target's generated code."""
    shown = set()
    for call in compiled.calls:
        if call.kernel in shown:
            continue
        shown.add(call.kernel)
        kernel = compiled.kernels[call.kernel]
        click.echo(f"# kernel {call.name} ({kernel.source} config)")
        if tir:
            click.echo(_generated_source(compiled.backend, kernel.executable)
                       or (kernel.func.script() if kernel.func is not None else "# (no TIR: loaded from a pack)"))
        if asm:
            click.echo(compiled.backend.source(kernel.executable, "asm"))


@cli.command("grad")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--loss", required=True, help="Name of the scalar value to differentiate.")
@click.option("--wrt", default="params", show_default=True,
              help="Comma list of value names, or 'params': every trainable float constant.")
@click.option("--optimizer", default=None, help="sgd or adam: write a full training step instead.")
@click.option("--lr", type=Finite(0.0), default=None, help="Learning rate, >= 0 (sgd 0.01, adam 0.001).")
@click.option("--momentum", type=Finite(0.0), default=None, help="SGD momentum, >= 0 (default 0).")
@click.option("--betas", default=None, help="Adam's beta1,beta2, each in [0, 1) (default 0.9,0.999).")
@click.option("--eps", type=Finite(0.0), default=None, help="Adam's epsilon, >= 0 (default 1e-8).")
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
        if not all(0.0 <= b < 1.0 for b in settings["betas"]):  # also false for nan
            raise click.BadParameter(f"each beta must be in [0, 1), got {betas!r}", param_hint="--betas")
    writable(output_path)
    names = None if wrt.strip() == "params" else [n.strip().lstrip("%") for n in wrt.split(",") if n.strip()]
    loss = loss.lstrip("%")
    graph = load_model(model)
    if optimizer is None:
        result = grad_graph(graph, loss, names)
        if len(result.outputs) == 1:  # nothing to differentiate: say so rather than write the loss alone
            raise InputError(f"the loss %{loss} depends on no trainable parameter (float constant) of {model.name}: "
                             "name the values to differentiate with --wrt")
        _save_mir(save_mir, result, output_path)
        console.print(f"wrote {output_path}: outputs %{loss} and {len(result.outputs) - 1} gradient(s)")
        for v in result.outputs[1:]:
            console.print(f"  %{v.name}: {v.type}")
    else:
        result = train_step(graph, loss, names, optimizer, **settings)
        _save_mir(save_mir, result, output_path)
        init = output_path.with_suffix(".init.npz")
        state = initial_state(graph, result)
        try:
            np.savez(init, **state)
        except OSError as e:
            raise _write_error(init, e) from None
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
    """Write a model (.onnx, .mindir, composite JSON, .mir) in akg's .mir text form."""
    from akg.graph.io import emit_mir, load_model, save_mir

    if output_path.suffix.lower() != ".mir":
        raise click.BadParameter(f"must end in .mir, got {str(output_path)!r}", param_hint="-o")
    writable(output_path)
    graph = load_model(model)
    _save_mir(save_mir, graph, output_path)
    console.print(f"wrote {output_path}: @{graph.name}, {len(graph.nodes)} nodes, "
                  f"{len(graph.inputs)} inputs, {len(graph.outputs)} outputs")
    if emit_mir(graph, weights_file=output_path.with_suffix(".npz").name)[1]:
        console.print(f"weights: {output_path.with_suffix('.npz')}")


def _save_mir(save_mir, graph, path: Path) -> None:
    make_parent(path)
    try:
        save_mir(graph, path)
    except OSError as e:
        raise _write_error(path, e) from None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an `--inputs` file, an .npz archive (what `numpy.savez(name=array, ...)`
    writes); InputDataError for anything else (a lone .npy, a text or a damaged file)."""
    how = "save the inputs with numpy.savez(path, name=array, ...)"
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except FileNotFoundError:
        raise InputDataError(f"{path}: no such file") from None
    except OSError as e:
        raise InputDataError(f"{path}: cannot read: {e.strerror}") from None
    if magic == b"\x93NUMPY":
        raise InputDataError(f"{path} is not an .npz archive but a single .npy array, which does not say which "
                             f"input it is: {how}")
    if not magic.startswith(b"PK"):
        raise InputDataError(f"{path} is not an .npz archive (a zip of named .npy arrays): {how}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as e:
        raise InputDataError(f"{path}: not a readable .npz archive: {one_line(e)}") from None
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray):
            raise InputDataError(f"{path}: member '{name}' is not a .npy array: {how}")
    return arrays


def _register_commands() -> None:
    import akg.cli_parallel as parallel
    import akg.cli_report as report
    import akg.cli_tuning as tuning

    # a module imported before akg.cli is half-made here and registers itself at its end
    for module in (tuning, report, parallel):
        for command in getattr(module, "COMMANDS", ()):
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
    except Exception as e:  # a bug in akg, not in the user's input, unless it is a resource limit
        if debug:
            raise
        resource = resource_error(e)
        if resource is not None:
            _say_error(f"error: {resource}")
            return resource.exit_code
        detail = f": {one_line(e)}" if str(e).strip() else ""
        _say_error(f"internal error: {type(e).__name__}{detail} (rerun with --debug for the traceback)")
        return 70
    return 0


# NumPy's messages when an array's shape or size is beyond what it can allocate
_ALLOCATION_MESSAGES = ("maximum allowed dimension exceeded", "array is too big", "maximum allowed size exceeded",
                        "too large to convert to c", "negative dimensions are not allowed")


def resource_error(e: BaseException) -> ResourceError | None:
    """A ResourceError for an exception that means "this input is too big or too deep for this
    machine" (MemoryError, RecursionError, NumPy's allocation ValueErrors), else None. A safety
    net: the readers and planners should reject such inputs themselves, with a location."""
    if isinstance(e, MemoryError):
        detail = f" ({one_line(e)})" if str(e) else ""
        return ResourceError(f"out of memory{detail}: the model's tensors, or the work on them, do not fit in "
                             f"this machine's memory; check its shapes (akg show MODEL)")
    if isinstance(e, RecursionError):
        return ResourceError("the input is nested too deeply to process (Python's recursion limit was reached); "
                             "flatten deeply nested literals or lists")
    if isinstance(e, (ValueError, OverflowError)) and any(m in str(e).lower() for m in _ALLOCATION_MESSAGES):
        return ResourceError(f"a tensor is too large to allocate ({one_line(e)}); check the model's shapes "
                             f"(akg show MODEL)")
    return None


if __name__ == "__main__":
    sys.exit(main())

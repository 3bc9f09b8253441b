"""Typed errors for every stage of akg; the CLI turns them into one line and an exit code."""

from __future__ import annotations


def one_line(e: BaseException, limit: int = 300) -> str:
    """An error's message on one line of at most `limit` characters (its type's name when it
    has no message): what an error that wraps another quotes of it."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


class AkgError(Exception):
    """Base of every error akg raises on purpose. `exit_code` is what the CLI exits with."""

    exit_code = 1


# --- bad input (models, files, graphs) --------------------------------------------------


class InputError(AkgError):
    """The user's input is malformed or inconsistent."""

    exit_code = 3


class MirParseError(InputError):
    """A syntax or semantic error in a `.mir` file, located at file:line:col."""

    def __init__(self, message: str, filename: str = "<string>", line: int = 0, col: int = 0):
        self.filename, self.line, self.col, self.reason = filename, line, col, message
        super().__init__(f"{filename}:{line}:{col}: {message}")


class ImportFormatError(InputError):
    """A model file of another format (composite JSON, MindIR, ...) cannot be read."""


class InvalidGraphError(InputError):
    """A graph breaks an IR rule: undefined value, cycle, type mismatch, duplicate name."""


class ShapeError(InvalidGraphError):
    """Shapes or dtypes of an op's inputs do not fit the op."""


class AttrError(InvalidGraphError):
    """An op attribute is missing, unknown, of the wrong type or out of range."""


class WeightsError(InputError):
    """A weights file is missing, unreadable, or lacks a tensor the model references."""


class InputDataError(InputError):
    """Arrays given to run a graph or kernel do not match its inputs."""


class OutputPathError(InputError):
    """An output path (`--output`, `-o`) that cannot be written; raised before any work."""


class ResourceError(InputError):
    """The input needs more memory or nesting than this machine or Python allows (a MemoryError
    or RecursionError that no earlier check caught)."""


class TooLargeError(InputError):
    """A model's tensors need more memory than this machine has (checked before allocating),
    or more elements than an array can index."""


# --- unsupported things -----------------------------------------------------------------


class UnsupportedError(AkgError):
    """Something valid that akg does not (yet) handle."""

    exit_code = 4


class UnknownOpError(UnsupportedError):
    """An op name that is not in the registry."""

    def __init__(self, op: str, known: list[str] | None = None):
        self.op = op
        hint = ""
        if known:
            import difflib

            close = difflib.get_close_matches(op, known, n=3)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        super().__init__(f"unknown op '{op}'{hint}")


class UnsupportedOpError(UnsupportedError):
    """An op that exists but has no implementation for a stage or target."""

    def __init__(self, op: str, target: str | None = None, reason: str = ""):
        self.op, self.target = op, target
        where = f" on target '{target}'" if target else ""
        super().__init__(f"op '{op}' is not supported{where}" + (f": {reason}" if reason else ""))


class MissingRuleError(UnsupportedError):
    """A registry has no entry for a key (`no VJP rule for 'erf'`)."""


class UnknownTargetError(UnsupportedError):
    """A target name that akg does not know; the message lists the known ones."""


# --- compilation ------------------------------------------------------------------------


class CompileError(AkgError):
    exit_code = 5


class ScheduleError(CompileError):
    """A schedule or mapping Config is illegal for the subgraph (the tuner skips it)."""


class RaceError(ScheduleError):
    """A mapping lets two threads of a block touch one element with no barrier between them
    (or two blocks, which no barrier orders), one of them writing; `races` lists each
    conflict with its statements, tensor and an example pair of instances."""

    def __init__(self, message: str, races: list | None = None):
        self.races = list(races or [])
        super().__init__(message)


class UnprovenRaceError(RaceError):
    """The race checker could not prove a mapping race-free (isl's operation quota, or a
    schedule it does not analyse); the mapping is refused, not assumed correct."""


class LoweringError(CompileError):
    """Turning a schedule into TIR or machine code failed."""


class VerificationError(CompileError):
    """A generated kernel does not match the reference."""


# --- infrastructure ---------------------------------------------------------------------


class DatabaseError(AkgError):
    exit_code = 6


class ClusterError(AkgError):
    """A Dask cluster to measure on cannot be started or reached, or has no worker that
    measures the tuner's target (`akg tune --workers/--scheduler`); or a rank of a
    multi-process run fails (the subclasses below)."""

    exit_code = 7


# --- auto-parallel ------------------------------------------------------------------------


class ShardingError(InputError):
    """A mesh or a sharding that cannot be: an unknown or repeated mesh axis, a tensor dim not
    divisible by the devices splitting it, a pinned sharding no strategy of its op takes."""


class RankFailedError(ClusterError):
    """A rank of a multi-process run (`akg.distributed`) raised an error or died; names the
    rank (`.rank`) and keeps its traceback (`.rank_traceback`)."""


class RankTimeoutError(ClusterError):
    """A multi-process run did not finish in time: a rank hung, or waits on one that did."""


class NoPlanError(AkgError):
    """No parallel plan fits: every strategy of some op (or the whole model) exceeds the
    per-device memory budget, or the mesh cannot hold the requested pipeline stages."""

    exit_code = 8

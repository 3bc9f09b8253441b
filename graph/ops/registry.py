"""The op registry: every op's attributes, shape/dtype inference, NumPy reference and FLOPs."""

from __future__ import annotations

import inspect
import reprlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from akg.errors import AttrError, InvalidGraphError, MissingRuleError, ShapeError, UnknownOpError
from akg.registry import Registry
from akg.graph.types import TensorType, canonical_dtype

# Op kinds: what later stages (fusion, kernel generation) need to know about an op.
ELEMWISE = "elementwise"  # out[i] = f(in[i]...), inputs broadcast
LAYOUT = "layout"  # pure index change: reshape, transpose, broadcast_to, slice, concat, pad...
REDUCE = "reduce"
LINALG = "linalg"  # matmul family
CONV = "conv"
POOL = "pool"
INDEX = "index"  # data-dependent addressing: gather, one_hot
COMPOSITE = "composite"  # expanded into basic ops before kernel generation
COLLECTIVE = "collective"  # per-rank SPMD graphs: data exchanged between ranks (graph/parallel), no kernel
KINDS = (ELEMWISE, LAYOUT, REDUCE, LINALG, CONV, POOL, INDEX, COMPOSITE, COLLECTIVE)

REQUIRED = object()  # default of an attribute that must be given
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # int attributes: what NumPy and the kernels index with

# Attribute kinds and how a parsed/user value is turned into the canonical stored value.
ATTR_KINDS = ("int", "float", "bool", "str", "ints", "floats", "dtype")


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxlist, _BRIEF.maxtuple, _BRIEF.maxdict = 3, 12, 12, 8
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 60, 60, 40


def brief(value: Any) -> str:
    """repr for messages, shortened to a few items and three levels of nesting: a value from a
    damaged file may be huge or nested deep (where repr itself would recurse too far)."""
    return _BRIEF.repr(value)


@dataclass(frozen=True)
class Attr:
    """One declared attribute: name, kind (see ATTR_KINDS), default, optional extra check.

    `optional=True` admits None (for example `axes=None` meaning all axes). `check` gets the
    canonical value and returns an error message or None. `canonical` maps a checked value to
    the one spelling of its meaning (a conv's `padding=[1, 1]` to `[1, 1, 1, 1]`), so that
    two imports of the same op have equal attributes, hence the same workload key.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    optional: bool = False
    choices: tuple | None = None
    check: Callable[[Any], str | None] | None = None
    canonical: Callable[[Any], Any] | None = None

    def __post_init__(self):
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"attribute kind '{self.kind}' (known: {ATTR_KINDS})")

    def coerce(self, op: str, value: Any) -> Any:
        """Validate and canonicalise a value; AttrError names the op and the attribute."""

        def bad(expected: str) -> AttrError:
            return AttrError(
                f"op '{op}': attribute '{self.name}' expects {expected}, got {brief(value)}"
            )

        if value is None:
            if self.optional:
                return None
            raise bad(f"a value of kind {self.kind}")
        kind = self.kind
        if kind == "int":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise bad("an integer")
            out: Any = int(value)
            if not _INT64_MIN <= out <= _INT64_MAX:
                raise bad("an integer of at most 64 bits")
        elif kind == "float":
            if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.integer, np.floating)
            ):
                raise bad("a number")
            try:
                out = float(value)
            except OverflowError:
                raise bad("a number within the float64 range") from None
        elif kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise bad("true or false")
            out = bool(value)
        elif kind == "str":
            if not isinstance(value, str):
                raise bad("a string")
            out = value
        elif kind == "dtype":
            if not isinstance(value, str):
                raise bad("a dtype name")
            try:
                out = canonical_dtype(value)
            except ValueError as e:
                raise AttrError(f"op '{op}': attribute '{self.name}': {e}") from None
        elif kind == "ints":
            if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
                value = [value]
            if not isinstance(value, (list, tuple)) or any(
                isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))
                for v in value
            ):
                raise bad("a list of integers")
            out = tuple(int(v) for v in value)
            if any(not _INT64_MIN <= v <= _INT64_MAX for v in out):
                raise bad("integers of at most 64 bits")
        else:  # floats
            if not isinstance(value, (list, tuple)) or any(
                isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number))
                for v in value
            ):
                raise bad("a list of numbers")
            try:
                out = tuple(float(v) for v in value)
            except OverflowError:
                raise bad("numbers within the float64 range") from None
        if self.choices is not None and out not in self.choices:
            raise AttrError(
                f"op '{op}': attribute '{self.name}' must be one of "
                f"{', '.join(map(repr, self.choices))}, got {out!r}"
            )
        if self.check is not None:
            problem = self.check(out)
            if problem:
                raise AttrError(f"op '{op}': attribute '{self.name}' {problem}, got {out!r}")
        if self.canonical is not None:
            out = self.canonical(out)
        return out


class Attrs(Mapping[str, Any]):
    """Frozen, hashable attribute mapping with canonical values (kept in declaration order)."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, Any] | Sequence[tuple[str, Any]] = ()):
        pairs = tuple(items.items() if isinstance(items, Mapping) else items)
        self._items = dict(pairs)
        self._hash = hash(tuple(self._items.items()))

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}={v!r}" for k, v in self._items.items()) + "}"


InferFn = Callable[..., "TensorType | tuple[TensorType, ...]"]
ReferenceFn = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]
FlopsFn = Callable[[Sequence[TensorType], Sequence[TensorType], Attrs], int]


def _default_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: Attrs) -> int:
    return sum(t.size for t in outs)


@dataclass(frozen=True)
class OpDef:
    """Everything the graph layer knows about one op.

    `arity` is the exact input count, or (min, max) with max None for variadic ops.
    `infer(*input_types, **attrs)` returns the output type(s); `reference(*arrays, **attrs)`
    the output array(s). `index_bounds(*input_types, **attrs)` maps input positions that hold
    indices to their exclusive upper bound, so random test inputs stay in range.
    """

    name: str
    kind: str
    arity: int | tuple[int, int | None]
    attrs: tuple[Attr, ...]
    infer: InferFn
    reference: ReferenceFn
    flops: FlopsFn = _default_flops
    differentiable: bool = True
    index_bounds: Callable[..., dict[int, int]] | None = None
    doc: str = ""
    _attr_by_name: dict[str, Attr] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"op '{self.name}': kind '{self.kind}' (known: {KINDS})")
        self._attr_by_name.update({a.name: a for a in self.attrs})

    # --- attributes -----------------------------------------------------------------

    def check_attrs(self, given: Mapping[str, Any]) -> Attrs:
        """Fill defaults, reject unknown or missing attributes, canonicalise values."""
        unknown = [k for k in given if k not in self._attr_by_name]
        if unknown:
            known = ", ".join(a.name for a in self.attrs) or "none"
            raise AttrError(
                f"op '{self.name}' has no attribute '{unknown[0]}' (its attributes: {known})"
            )
        out = []
        for a in self.attrs:
            if a.name in given:
                out.append((a.name, a.coerce(self.name, given[a.name])))
            elif a.default is REQUIRED:
                raise AttrError(f"op '{self.name}' needs attribute '{a.name}' ({a.kind})")
            else:
                out.append((a.name, a.default if a.default is None else a.coerce(self.name, a.default)))
        return Attrs(out)

    # --- types ----------------------------------------------------------------------

    def check_arity(self, n: int) -> None:
        lo, hi = (self.arity, self.arity) if isinstance(self.arity, int) else self.arity
        if n < lo or (hi is not None and n > hi):
            want = str(lo) if lo == hi else f"{lo}..{'' if hi is None else hi}"
            raise InvalidGraphError(f"op '{self.name}' takes {want} inputs, got {n}")

    def infer_types(self, inputs: Sequence[TensorType], attrs: Attrs) -> tuple[TensorType, ...]:
        """Output types for these inputs; ShapeError messages start with the op name."""
        self.check_arity(len(inputs))
        try:
            out = self.infer(*inputs, **attrs)
        except ShapeError as e:
            msg = str(e)
            raise ShapeError(msg if msg.startswith(f"op '{self.name}'") else f"op '{self.name}': {msg}") from None
        return out if isinstance(out, tuple) else (out,)

    def evaluate(self, arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        out = self.reference(*arrays, **attrs)
        return out if isinstance(out, tuple) else (out,)

    def count_flops(self, ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: Attrs) -> int:
        return int(self.flops(ins, outs, attrs))


OPS: Registry[OpDef] = Registry("op", missing_error=lambda name, known: UnknownOpError(name, known))


def get_op(name: str) -> OpDef:
    return OPS.get(name)


def defop(
    name: str,
    *,
    kind: str,
    infer: InferFn,
    arity: int | tuple[int, int | None] | None = None,
    attrs: Sequence[Attr] = (),
    flops: FlopsFn | None = None,
    differentiable: bool = True,
    index_bounds: Callable[..., dict[int, int]] | None = None,
) -> Callable[[ReferenceFn], ReferenceFn]:
    """Register the decorated NumPy function as the reference of a new op.

    Arity defaults to the number of the reference's positional parameters that are not
    attributes (variadic `*xs` gives (1, None)).
    """

    def wrap(reference: ReferenceFn) -> ReferenceFn:
        nonlocal arity
        if arity is None:
            params = inspect.signature(reference).parameters.values()
            attr_names = {a.name for a in attrs}
            positional = [p for p in params
                          if p.kind == p.POSITIONAL_OR_KEYWORD and p.name not in attr_names]
            if any(p.kind == p.VAR_POSITIONAL for p in params):
                arity = (1, None)
            else:
                arity = len(positional)
        OPS.register(
            name,
            OpDef(
                name=name,
                kind=kind,
                arity=arity,
                attrs=tuple(attrs),
                infer=infer,
                reference=reference,
                flops=flops or _default_flops,
                differentiable=differentiable,
                index_bounds=index_bounds,
                doc=(reference.__doc__ or "").strip(),
            ),
        )
        return reference

    return wrap


# --- compute definitions ------------------------------------------------------------------------


@dataclass(frozen=True)
class ComputeCtx:
    """What a compute definition gets besides its input tensors: the op, a name for the tensors
    it creates and the output types the op inferred."""

    op: str
    name: str
    outs: tuple[TensorType, ...]
    window_phases: bool = True  # strided padded windows read their input in phases (`Target.window_phases`)
    vector_bits: int = 0  # the target's vector width (`Target.vector_bits`; 0: unknown)

    @property
    def out(self) -> TensorType:
        return self.outs[0]


COMPUTES: Registry[Callable] = Registry("compute definition")


def defcompute(*names: str) -> Callable[[Callable], Callable]:
    """Register `fn(ctx, *input_tensors, **attrs) -> Tensor | tuple[Tensor, ...]` as the tensor
    expression of the named basic op(s)."""

    def wrap(fn: Callable) -> Callable:
        for name in names:
            COMPUTES.register(name, fn)
        return fn

    return wrap


# --- expanders ----------------------------------------------------------------------------------

EXPANDERS: Registry[Callable] = Registry("expander")


def defexpand(*names: str) -> Callable[[Callable], Callable]:
    """Register `fn(e, *input_values, **attrs) -> Value | tuple` that rewrites a composite op
    into basic ops through `e` (an `akg.graph.expand.Emitter`: `e.op(...)`, `e.const(...)`)."""

    def wrap(fn: Callable) -> Callable:
        for name in names:
            EXPANDERS.register(name, fn)
        return fn

    return wrap


# --- VJP rules ----------------------------------------------------------------------------------

VJP_RULES: Registry[Callable] = Registry("VJP rule")


def defvjp(*names: str) -> Callable[[Callable], Callable]:
    """Register `fn(e, g, *input_values, **attrs) -> tuple` as the reverse-mode rule of the named
    differentiable op(s).

    `e` is an `akg.graph.autodiff.VjpEmitter` (`e.op(...)`, `e.const(...)`, `e.out` the op's
    output in the gradient graph, `e.unbroadcast(...)`); `g` is the cotangent of the output
    (a tuple of them for multi-output ops, zeros where an output is unused). The result holds
    one cotangent per input, None for inputs without one (integer indices, conditions)."""

    def wrap(fn: Callable) -> Callable:
        for name in names:
            VJP_RULES.register(name, fn)
        return fn

    return wrap


# --- sharding rules (auto-parallel) -------------------------------------------------------------

SHARDING_RULES: Registry[Callable] = Registry(
    "sharding rule", missing_error=lambda name, known: MissingRuleError(
        f"no sharding rule for op '{name}': add one next to its op family (defsharding in "
        f"graph/ops/<family>.py), or pin the op's inputs replicated"))


def defsharding(*names: str) -> Callable[[Callable], Callable]:
    """Register `fn(call, mesh) -> list[Strategy]` as the sharding rule of the named op(s):
    every legal way to run the op on `mesh` (an `akg.graph.parallel.Mesh`), each an
    `akg.graph.parallel.strategy.Strategy` of input and output shardings; `call` is an
    `OpCall` (op, input and output types, attrs). Replicated everywhere is always legal and
    need not be listed (the search adds it)."""

    def wrap(fn: Callable) -> Callable:
        for name in names:
            SHARDING_RULES.register(name, fn)
        return fn

    return wrap

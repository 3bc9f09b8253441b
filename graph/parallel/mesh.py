"""A device mesh: named axes over N devices (`dp=2,tp=4`), ranks laid out row-major (the
last axis varies fastest), `devices_per_node` devices per node.

A collective over some axes runs in the groups of ranks that differ only in those axes;
it stays inside a node when all ranks of a group do (what decides the intra- or inter-node
alpha/beta of the cost model)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from akg.errors import ShardingError

_AXIS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_DEVICES = 1 << 20  # a plan enumerates ranks and groups: beyond this it never ends


@dataclass(frozen=True)
class Mesh:
    """`axes`: (name, size) pairs, outermost first; `devices_per_node`: devices sharing a
    node's fast links (NVLink-class), the rest talk over the network."""

    axes: tuple[tuple[str, int], ...]
    devices_per_node: int = 8

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple((str(n), int(s)) for n, s in self.axes))
        names = [n for n, _ in self.axes]
        for n, s in self.axes:
            if not _AXIS_RE.fullmatch(n):
                raise ShardingError(f"bad mesh axis name {n!r} (letters, digits, '_')")
            if s < 1:
                raise ShardingError(f"mesh axis '{n}' has size {s}; sizes are at least 1")
        if len(set(names)) != len(names):
            raise ShardingError(f"mesh axis names repeat: {', '.join(names)}")
        if self.size > MAX_DEVICES:
            raise ShardingError(f"mesh {self} has {self.size} devices; at most {MAX_DEVICES} are supported")
        if self.devices_per_node < 1:
            raise ShardingError(f"devices per node must be at least 1, got {self.devices_per_node}")

    @classmethod
    def parse(cls, text: str, devices_per_node: int = 8) -> "Mesh":
        """`"dp=2,tp=4"` -> Mesh((("dp", 2), ("tp", 4)))."""
        axes = []
        for part in (p.strip() for p in str(text).split(",")):
            name, eq, size = part.partition("=")
            if not eq or not size.strip().isdigit():
                raise ShardingError(f"bad mesh {text!r}: write axes as name=size, e.g. dp=2,tp=4")
            axes.append((name.strip(), int(size)))
        return cls(tuple(axes), devices_per_node)

    def __str__(self) -> str:
        return ",".join(f"{n}={s}" for n, s in self.axes)

    # --- shape --------------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @property
    def size(self) -> int:
        """The number of devices."""
        return math.prod(s for _, s in self.axes)

    def axis_size(self, axis: str) -> int:
        for n, s in self.axes:
            if n == axis:
                return s
        raise ShardingError(f"mesh {self} has no axis '{axis}' (its axes: {', '.join(self.names)})")

    def group_size(self, axes: Iterable[str]) -> int:
        return math.prod(self.axis_size(a) for a in axes)

    def stride(self, axis: str) -> int:
        """Rank distance between neighbours along `axis`."""
        self.axis_size(axis)
        out = 1
        for n, s in reversed(self.axes):
            if n == axis:
                return out
            out *= s
        raise AssertionError(axis)

    # --- ranks --------------------------------------------------------------------------

    def coords(self, rank: int) -> dict[str, int]:
        """The position of `rank` on every axis."""
        if not 0 <= rank < self.size:
            raise ShardingError(f"rank {rank} is not on mesh {self} of {self.size} devices")
        out = {}
        for n, s in reversed(self.axes):
            out[n] = rank % s
            rank //= s
        return {n: out[n] for n in self.names}

    def rank(self, coords: dict[str, int]) -> int:
        r = 0
        for n, s in self.axes:
            r = r * s + coords.get(n, 0)
        return r

    def group(self, rank: int, axes: Sequence[str]) -> list[int]:
        """The ranks that differ from `rank` only on `axes`, ordered by their position along
        `axes` (the first axis outermost): a collective's group, in the order its pieces
        concatenate."""
        base = self.coords(rank)
        sizes = [self.axis_size(a) for a in axes]
        out = []
        for flat in range(math.prod(sizes)):
            c = dict(base)
            for a, s in zip(reversed(list(axes)), reversed(sizes)):
                c[a] = flat % s
                flat //= s
            out.append(self.rank(c))
        return out

    def groups(self, axes: Sequence[str]) -> list[list[int]]:
        """Every group of a collective over `axes`, each listed once (in the order of their
        first ranks)."""
        leaders = (r for r in range(self.size) if not any(map(self.coords(r).get, axes)))
        return [self.group(r, axes) for r in leaders]

    def index_in(self, rank: int, axes: Sequence[str]) -> int:
        """The position of `rank` in its group over `axes`."""
        return self.group(rank, axes).index(rank)

    def intra_node(self, axes: Sequence[str]) -> bool:
        """Whether every group over `axes` lies inside one node (ranks fill nodes in order)."""
        if not axes:
            return True
        return all(g[0] // self.devices_per_node == g[-1] // self.devices_per_node for g in self.groups(axes))

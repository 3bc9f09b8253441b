"""How one value lies on a mesh: per tensor dim the mesh axes splitting it (none: replicated
along that dim), and the mesh axes over which each device holds only a partial sum.

`Sharding(((), ("tp",)), partial=("dp",))` is a matrix whose columns are split over `tp`,
whose rows are whole, and which must be summed over `dp` to be the value. A dim split over
several axes is split by the first (outermost) then within each piece by the next.
Printed as `[R, S(tp)] P(dp)`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from akg.errors import ShardingError
from akg.graph.parallel.mesh import Mesh


@dataclass(frozen=True)
class Sharding:
    dims: tuple[tuple[str, ...], ...]
    partial: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(tuple(d) for d in self.dims))
        object.__setattr__(self, "partial", tuple(sorted(self.partial)))  # a set: kept sorted
        used = [a for d in self.dims for a in d] + list(self.partial)
        if len(set(used)) != len(used):
            raise ShardingError(f"sharding {self} uses a mesh axis twice")

    @classmethod
    def replicated(cls, rank: int) -> "Sharding":
        return cls(((),) * rank)

    @classmethod
    def split(cls, rank: int, dim: int, *axes: str) -> "Sharding":
        """Dim `dim` split over `axes`, the rest replicated."""
        dims = [()] * rank
        dims[dim] = tuple(axes)
        return cls(tuple(dims))

    @classmethod
    def parse(cls, text: str) -> "Sharding":
        """The printed form back: `[R, S(tp)] P(dp)`, `[S(dp,tp)]`, `[]`."""
        text = text.strip()
        body, _, rest = text.partition("]")
        if not body.startswith("["):
            raise ShardingError(f"bad sharding {text!r} (e.g. [S(dp), R] or [R, R] P(tp))")
        dims = []
        for part in _split_top(body[1:]):
            if part == "R":
                dims.append(())
            elif part.startswith("S(") and part.endswith(")"):
                dims.append(tuple(a.strip() for a in part[2:-1].split(",") if a.strip()))
            else:
                raise ShardingError(f"bad sharding {text!r}: a dim is R or S(axes), got {part!r}")
        rest = rest.strip()
        partial: tuple[str, ...] = ()
        if rest:
            if not (rest.startswith("P(") and rest.endswith(")")):
                raise ShardingError(f"bad sharding {text!r}: after the dims only P(axes) may follow")
            partial = tuple(a.strip() for a in rest[2:-1].split(",") if a.strip())
        return cls(tuple(dims), partial)

    def __str__(self) -> str:
        dims = ", ".join("S(" + ",".join(d) + ")" if d else "R" for d in self.dims)
        return f"[{dims}]" + (f" P({','.join(self.partial)})" if self.partial else "")

    # --- queries ------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def axes(self) -> tuple[str, ...]:
        """Every mesh axis this sharding uses (splits, then partials)."""
        return tuple(a for d in self.dims for a in d) + self.partial

    @property
    def is_replicated(self) -> bool:
        return not self.axes

    def dim_of(self, axis: str) -> int | None:
        """The tensor dim split over `axis`, or None."""
        for i, d in enumerate(self.dims):
            if axis in d:
                return i
        return None

    def check(self, shape: Sequence[int], mesh: Mesh, what: str = "value") -> None:
        """ShardingError unless every split dim divides evenly and every axis is the mesh's."""
        if len(shape) != self.rank:
            raise ShardingError(f"{what}: sharding {self} has {self.rank} dims, the value {len(shape)}")
        for a in self.axes:
            mesh.axis_size(a)
        for i, (n, d) in enumerate(zip(shape, self.dims)):
            k = mesh.group_size(d)
            if n % k:
                raise ShardingError(f"{what}: dim {i} of size {n} does not split evenly over "
                                    f"{'x'.join(d)} ({k} devices)")

    def local_shape(self, shape: Sequence[int], mesh: Mesh) -> tuple[int, ...]:
        """The shape each device holds."""
        return tuple(n // mesh.group_size(d) for n, d in zip(shape, self.dims))

    def divides(self, shape: Sequence[int], mesh: Mesh) -> bool:
        return len(shape) == self.rank and all(n % mesh.group_size(d) == 0 for n, d in zip(shape, self.dims))

    def with_dim(self, dim: int, axes: Sequence[str]) -> "Sharding":
        dims = list(self.dims)
        dims[dim] = tuple(axes)
        return Sharding(tuple(dims), self.partial)

    def with_partial(self, axes: Sequence[str]) -> "Sharding":
        return Sharding(self.dims, tuple(axes))

    # --- arrays on simulated ranks -----------------------------------------------------

    def shard(self, array: np.ndarray, mesh: Mesh, rank: int) -> np.ndarray:
        """The piece `rank` holds of the whole value `array` (a partial value: the whole on
        the first rank of each partial group, zeros on the others, which sum to it)."""
        self.check(array.shape, mesh)
        index = []
        for n, d in zip(array.shape, self.dims):
            k, pos = mesh.group_size(d), mesh.index_in(rank, d) if d else 0
            step = n // k
            index.append(slice(pos * step, (pos + 1) * step))
        piece = np.array(array[tuple(index)])
        if self.partial and mesh.index_in(rank, self.partial) != 0:
            piece = np.zeros_like(piece)
        return piece

    def unshard(self, pieces: Sequence[np.ndarray], mesh: Mesh) -> np.ndarray:
        """The whole value from every rank's piece (`pieces[rank]`): pieces concatenated
        along split dims, partial groups summed. ShardingError where ranks that must hold
        the same data disagree is not checked here (see `replicas_agree`)."""
        if len(pieces) != mesh.size:
            raise ShardingError(f"{len(pieces)} pieces for a mesh of {mesh.size} devices")
        local = pieces[0].shape
        shape = tuple(n * mesh.group_size(d) for n, d in zip(local, self.dims))
        dtype = np.result_type(*[p.dtype for p in pieces])
        out = np.zeros(shape, dtype)
        # one representative per distinct piece position: sum over partial groups
        done = set()
        for r in range(mesh.size):
            c = mesh.coords(r)
            key = tuple(c[a] for a in self.axes)
            if key in done:
                continue
            done.add(key)
            index = []
            for n, d in zip(local, self.dims):
                pos = mesh.index_in(r, d) if d else 0
                index.append(slice(pos * n, (pos + 1) * n))
            out[tuple(index)] += pieces[r]
        return out


def _split_top(text: str) -> list[str]:
    """Split `R, S(dp,tp), R` at the commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def shard_all(values: Mapping[str, np.ndarray], shardings: Mapping[str, Sharding], mesh: Mesh
              ) -> list[dict[str, np.ndarray]]:
    """Per rank, the pieces of named whole values (replicated where no sharding is given)."""
    out = []
    for r in range(mesh.size):
        out.append({n: (shardings[n].shard(a, mesh, r) if n in shardings else np.array(a))
                    for n, a in values.items()})
    return out

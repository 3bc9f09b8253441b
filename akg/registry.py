"""One small generic registry type, used for every extension point (ops, rules, targets...)."""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, TypeVar

from akg.errors import MissingRuleError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Registry(Generic[T]):
    """A name -> object table filled by decorators next to what it describes.

    `get` on a missing key raises `missing_error` (default `MissingRuleError`) listing the known
    names, so a user sees `no VJP rule for 'erf'` rather than a KeyError.
    """

    def __init__(self, what: str, missing_error: Callable[[str, list[str]], Exception] | None = None):
        self.what = what
        self._items: dict[str, T] = {}
        self._missing_error = missing_error

    def register(self, name: str, item: T, *, replace: bool = False) -> T:
        if name in self._items and not replace:
            raise ValueError(f"{self.what} '{name}' is registered twice")
        self._items[name] = item
        return item

    def decorator(self, *names: str, make: Callable[[str, Any], T] | None = None,
                  replace: bool = False) -> Callable[[F], F]:
        """A decorator registering the function it decorates under each of `names`, as
        `make(name, fn)` when given (to wrap it in an entry), and returning it unchanged."""

        def wrap(fn: F) -> F:
            for name in names:
                self.register(name, fn if make is None else make(name, fn), replace=replace)
            return fn

        return wrap

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = sorted(self._items)
            if self._missing_error is not None:
                raise self._missing_error(name, known) from None
            raise MissingRuleError(
                f"no {self.what} for '{name}' (known: {', '.join(known) or 'none'})"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._items.items())

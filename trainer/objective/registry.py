"""Name → function registries: each switch value is one small registered function."""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Registry(Generic[F]):
    """Functions registered under a name, with optional metadata (e.g. a ratio's level)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._fns: dict[str, F] = {}
        self._meta: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **meta: Any) -> Callable[[F], F]:
        def add(fn: F) -> F:
            if name in self._fns:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._fns[name] = fn
            self._meta[name] = meta
            return fn

        return add

    def __getitem__(self, name: str) -> F:
        try:
            return self._fns[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._fns

    def meta(self, name: str) -> dict[str, Any]:
        self[name]  # raise the helpful error for unknown names
        return self._meta[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._fns)

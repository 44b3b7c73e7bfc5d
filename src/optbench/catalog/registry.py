"""A name -> object registry shared by models and techniques."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from optbench.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}

    def add(self, name: str, item: T, origin: str = "") -> T:
        """Register `item`; registering the same name again from the same origin replaces it
        (re-importing a file), from another origin is an error (two models would share one name)."""
        if name in self._items and self._origins.get(name) != origin:
            raise ValueError(
                f"{self.kind} {name!r} is registered twice: {self._origins[name] or '?'} and {origin or '?'}"
            )
        self._items[name] = item
        self._origins[name] = origin
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; valid {self.kind}s: {', '.join(self.names()) or '(none)'}"
            ) from None

    def names(self) -> list[str]:
        return list(self._items)

    def list(self, pattern: str = "*", tags_of: Callable[[T], Iterable[str]] | None = None) -> list[str]:
        """Registered names matching `pattern`, in registration order, as timm's `list_models`:
        a shell wildcard ('resnet*'), or 'tag:NAME' for the items `tags_of` gives that tag."""
        if pattern.startswith("tag:"):
            tag = pattern[4:]
            tagged = tags_of or (lambda item: ())
            return [n for n, item in self._items.items() if tag in set(tagged(item))]
        return [n for n in self._items if fnmatch.fnmatchcase(n, pattern)]

    def expand(self, patterns: list[str], tags_of: Callable[[T], Iterable[str]] | None = None) -> list[str]:
        """Names, wildcards and tags -> registered names, in the order given, without repeats.
        A plain name must exist; a wildcard or tag must match something."""
        names: list[str] = []
        for pattern in patterns:
            if is_pattern(pattern):
                found = self.list(pattern, tags_of)
                if not found:
                    raise UnknownNameError(
                        f"no {self.kind} matches {pattern!r}; valid {self.kind}s: {', '.join(self.names())}"
                    )
            else:
                self.check([pattern])
                found = [pattern]
            names += [n for n in found if n not in names]
        return names

    def origin(self, name: str) -> str:
        """The file that registered `name` ('' when unknown)."""
        return self._origins.get(name, "")

    def check(self, names: list[str]) -> None:
        """Raise UnknownNameError naming every unknown name at once."""
        unknown = [n for n in names if n not in self._items]
        if unknown:
            raise UnknownNameError(
                f"unknown {self.kind}{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                f"valid {self.kind}s: {', '.join(self.names()) or '(none)'}"
            )

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)


def is_pattern(value: str) -> bool:
    """A wildcard ('resnet*', 'vit_?_16') or a tag ('tag:cnn') rather than one name."""
    return value.startswith("tag:") or any(c in value for c in "*?[")

"""The packages' lazy re-exports (PEP 562): one ``__getattr__`` for every package ``__init__``
that lets its public names be imported from it while importing the module that defines each
only on first use (importing one module of a room does not load the rest)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, exports: Mapping[str, str],
                 namespace: MutableMapping[str, object]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps each public name to the
    module defining it; the first lookup imports it and caches it in ``namespace``."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    return __getattr__

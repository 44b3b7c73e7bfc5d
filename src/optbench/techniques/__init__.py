"""The technique registry. Every module in this package registers its techniques on import."""

from __future__ import annotations

import importlib
import pkgutil

from optbench.techniques.base import FAMILIES, TECHNIQUES, Prepared, Technique, register_technique

__all__ = ["FAMILIES", "TECHNIQUES", "Prepared", "Technique", "register_technique", "load_techniques"]


def load_techniques() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name != "base" and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")

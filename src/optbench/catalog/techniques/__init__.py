"""The technique registry. Every module in this package registers its techniques on import."""

from __future__ import annotations

import importlib
import pkgutil

from optbench.catalog.techniques.base import FAMILIES, TECHNIQUES, Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext
from optbench.catalog.techniques.stack import (
    Stack,
    check_techniques,
    default_techniques,
    register_default_stack,
    resolve,
)

__all__ = [
    "FAMILIES",
    "TECHNIQUES",
    "Prepared",
    "Stack",
    "Technique",
    "TechniqueContext",
    "check_techniques",
    "default_techniques",
    "load_techniques",
    "register_default_stack",
    "register_technique",
    "resolve",
]

_NOT_TECHNIQUES = {"base", "context", "stack"}


def load_techniques() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name not in _NOT_TECHNIQUES and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")

"""optbench: which PyTorch optimization is worth it for which model, measured on your hardware.

Heavy modules (torch) load lazily so that reading and reporting results stays fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "ModelSpec": "optbench.catalog.models",
    "register_model": "optbench.catalog.models",
    "image_classifier": "optbench.catalog.models",
    "text_classifier": "optbench.catalog.models",
    "TrainRecipe": "optbench.catalog.models",
    "MODELS": "optbench.catalog.models",
    "Technique": "optbench.catalog.techniques.base",
    "Prepared": "optbench.catalog.techniques.base",
    "register_technique": "optbench.catalog.techniques.base",
    "TECHNIQUES": "optbench.catalog.techniques.base",
    "TechniqueContext": "optbench.catalog.techniques.context",
    "register_default_stack": "optbench.catalog.techniques.stack",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'optbench' has no attribute {name!r}")

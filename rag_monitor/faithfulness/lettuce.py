"""LettuceDetect (KRLabs, MIT) as a faithfulness scorer: a ModernBERT token classifier.

LettuceDetect labels each *answer token* hallucinated (class 1) or supported (class 0) given
the question and the passages. The ``lettucedetect`` package (PyPI, 0.2.3) has the inference
code but pulls ``openai``, ``rag-fact-checker`` and scikit-learn in with it; we reproduce its
``TransformerDetector`` with transformers' own ``AutoModelForTokenClassification`` (no remote
code), with the same pre- and post-processing:

- the prompt is ``PromptUtils.format_context`` with ``qa_prompt_en.txt`` when the question is
  known, ``summary_prompt_en.txt`` otherwise; passages are numbered ``passage i: ...``;
- prompt and answer are one sentence pair, ``tokenizer(prompt, answer, truncation="only_first")``
  (``HallucinationDataset.prepare_tokenized_input``); the answer starts ``len(answer tokens) + 1``
  tokens before the end;
- a token is hallucinated when ``argmax(logits) == 1``; consecutive hallucinated tokens make a
  span (tokens with empty offsets are skipped), its confidence the highest class-1 probability
  (``_predict_single``);
- the answer-level probability is the highest class-1 probability over the answer's tokens,
  as the package's example-level evaluation (``evaluate_model_example_level``) takes it.

The score is ``1 - that probability`` (1.0 = supported, like every scorer here), so the
threshold 0.5 is the package's own decision (a span exists iff the score is below 0.5). Each
span is kept as a claim (``not_in_context``) with its character offsets in the answer: the
review page highlights it once the reviewer's verdict is saved, and the Phoenix annotation
lists it.

Two departures, both deliberate: a prompt longer than ``max_tokens`` is truncated (the
package splits the passages into chunks scored apart and takes the per-token max; scoring
runs in the worker's batches, one forward per pair) and the pair is reported ``truncated``;
and span offsets are the tokenizer's offsets in the answer as they are (the package subtracts
the first answer token's start, which shifts every span of an answer that begins with
whitespace).

Directory layout (what ``rag-monitor models pull lettucedetect DIR`` writes; any
``save_pretrained`` of a ModernBERT token classifier with its fast tokenizer loads)::

    DIR/config.json, DIR/model.safetensors    the token classifier (2 labels)
    DIR/tokenizer.json, tokenizer_config.json the fast tokenizer (offsets are needed)
    DIR/rag-monitor-model.json                what was pulled: the scorer's ``version``

Usage::

    scorer = LettuceScorer.load("/var/lib/rag-monitor/models/lettucedetect")
    scorer.assess(["Paris is in France."], "Paris is in Spain.", question="Where is Paris?")
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_monitor.faithfulness.claims import NOT_IN_CONTEXT, Assessment, Claim, ClaimScorer
from rag_monitor.faithfulness.hhem import MANIFEST_FILE, ModelLoadError, resolve_device, resolve_dtype
from rag_monitor.faithfulness.thresholds import shipped_threshold

logger = logging.getLogger(__name__)

LETTUCE_NAME = "lettucedetect"
LETTUCE_REPO_ID = "KRLabsOrg/lettucedect-large-modernbert-en-v1"
DEFAULT_MAX_TOKENS = 4096
"""The package's ``max_length``; ModernBERT reads up to 8192 tokens."""
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
# lettucedetect/prompts/qa_prompt_en.txt and summary_prompt_en.txt, byte for byte (no final newline).
QA_PROMPT = (
    "Briefly answer the following question:\n{question}\n"
    "Bear in mind that your response should be strictly based on the following {num_passages} passages:\n"
    "{context}\n"
    'In case the passages do not contain the necessary information to answer the question, please reply with: '
    '"Unable to answer based on given passages."\noutput:'
)
SUMMARY_PROMPT = "Summarize the following text:\n{text}\noutput:"


def format_prompt(passages: Sequence[str], question: str | None) -> str:
    """``PromptUtils.format_context(passages, question, "en")``."""
    block = "\n".join(f"passage {i + 1}: {p}" for i, p in enumerate(passages))
    if question is None:
        return SUMMARY_PROMPT.format(text=block)
    return QA_PROMPT.format(question=question, num_passages=len(passages), context=block)


@dataclass(frozen=True)
class EncodedAnswer:
    """One pair as token ids, with where the answer starts and its tokens' offsets in the answer."""

    input_ids: tuple[int, ...]
    answer_start: int
    offsets: tuple[tuple[int, int], ...]
    """Character offsets in ``answer`` of the tokens from ``answer_start`` on."""
    answer: str
    truncated: bool

    @property
    def length(self) -> int:
        return len(self.input_ids)


def _read_version(model_dir: Path) -> str:
    """``<repo name>@<revision>`` from ``models pull``'s manifest, else ``local``."""
    try:
        manifest = json.loads((model_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
        revision, repo = manifest.get("revision"), str(manifest.get("repo_id") or "")
    except (OSError, json.JSONDecodeError, AttributeError):
        return "local"
    if not revision:
        return "local"
    return f"{repo.rpartition('/')[2]}@{str(revision)[:12]}" if repo else str(revision)[:12]


def spans_of(probabilities: Sequence[float], offsets: Sequence[tuple[int, int]], answer: str) -> list[Claim]:
    """Consecutive tokens with P(hallucinated) > 0.5 (argmax of two classes) as claims with offsets."""
    spans: list[Claim] = []
    start = end = None
    confidence = 0.0
    for p, (s, e) in zip(probabilities, offsets):
        if s == e:
            continue  # special tokens: neither open nor close a span (as the package)
        if p > 0.5:
            start = s if start is None else start
            end, confidence = e, max(confidence, p)
        elif start is not None:
            spans.append(Claim(answer[start:end], NOT_IN_CONTEXT, confidence, start=start, end=end))
            start = end = None
            confidence = 0.0
    if start is not None:
        spans.append(Claim(answer[start:end], NOT_IN_CONTEXT, confidence, start=start, end=end))
    return spans


class LettuceScorer(ClaimScorer):
    """LettuceDetect: 1.0 = no answer token is hallucinated; the spans are the claims."""

    name = LETTUCE_NAME
    uses_question = True
    """The worker passes the query: the package's QA prompt names it."""

    def __init__(self, model: Any, tokenizer: Any, *, version: str, threshold: float | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, device: str = "cpu", source: str = "") -> None:
        if max_tokens < 64:
            raise ValueError(f"max_tokens must be at least 64, got {max_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.version = version
        self.threshold = shipped_threshold(LETTUCE_NAME, version) if threshold is None else float(threshold)
        self.max_tokens = max_tokens
        self.device = device
        self.source = source
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    @classmethod
    def load(cls, model_dir: str | os.PathLike[str], *, threshold: float | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
             torch_threads: int | None = 1, device: str = "auto", dtype: str = "auto") -> LettuceScorer:
        """Load a LettuceDetect directory (see the module docstring); never runs remote code."""
        try:
            import torch
            from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ModelLoadError("LettuceDetect needs torch and transformers: pip install 'rag-monitor[hhem]'") from exc
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        directory = Path(model_dir)
        if not directory.is_dir():
            raise ModelLoadError(f"LettuceDetect model path {str(directory)!r} is not a directory")
        missing = [name for name in REQUIRED_FILES if not (directory / name).is_file()]
        if missing:
            raise ModelLoadError(f"{directory} is not a LettuceDetect directory: missing {', '.join(missing)} "
                                 "(expected the layout written by `rag-monitor models pull lettucedetect DIR`)")
        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        try:
            config = AutoConfig.from_pretrained(directory, local_files_only=True)
            if config.num_labels != 2 or not any(a.endswith("ForTokenClassification") for a in config.architectures or []):
                raise ModelLoadError(f"{directory}: not a 2-label token classifier (architectures "
                                     f"{config.architectures}, {config.num_labels} labels)")
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
            model = AutoModelForTokenClassification.from_pretrained(directory, local_files_only=True, dtype=getattr(torch, dtype))
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot load LettuceDetect from {directory}: {exc}") from exc
        if not tokenizer.is_fast:
            raise ModelLoadError(f"{directory}: a fast tokenizer (tokenizer.json) is needed for span offsets")
        model = model.to(device).eval()
        logger.info("LettuceDetect (%s) on %s in %s", config.model_type, device, dtype)
        return cls(model, tokenizer, version=_read_version(directory), threshold=threshold, max_tokens=max_tokens,
                   device=device, source=str(directory))

    # --- encoding ---------------------------------------------------------------------

    def _answer_fits(self, answer: str) -> tuple[str, bool]:
        """The answer, cut to half the budget when it alone is longer (``only_first`` cannot cut it)."""
        encoding = self.tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
        offsets, limit = encoding["offset_mapping"], self.max_tokens // 2
        if len(offsets) <= limit:
            return answer, False
        return answer[: offsets[limit - 1][1]], True

    def encode(self, premise: str | Sequence[str], hypothesis: str, question: str | None = None) -> EncodedAnswer:
        """The package's prompt and sentence pair; the prompt truncated to fit ``max_tokens``."""
        passages = [premise] if isinstance(premise, str) else [str(p) for p in premise]
        answer, answer_cut = self._answer_fits(hypothesis)
        prompt = format_prompt(passages, question)
        full = len(self.tokenizer(prompt, answer)["input_ids"])
        encoding = self.tokenizer(prompt, answer, truncation="only_first", max_length=self.max_tokens,
                                  return_offsets_mapping=True)
        ids = encoding["input_ids"]
        answer_tokens = len(self.tokenizer(answer, add_special_tokens=False)["input_ids"])
        answer_start = len(ids) - answer_tokens - 1  # [CLS] prompt [SEP] answer [SEP]
        offsets = tuple(tuple(o) for o in encoding["offset_mapping"][answer_start:])
        return EncodedAnswer(tuple(ids), answer_start, offsets, answer, answer_cut or full > self.max_tokens)

    # --- scoring ------------------------------------------------------------------------

    def token_probabilities(self, batch: Sequence[EncodedAnswer]) -> list[list[float]]:
        """P(hallucinated) of each pair's tokens from ``answer_start`` on (right-padded batch)."""
        import torch

        width = max(e.length for e in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, e in enumerate(batch):
            input_ids[row, : e.length] = torch.tensor(e.input_ids, dtype=torch.long)
            mask[row, : e.length] = 1
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)).logits
            probabilities = torch.softmax(logits.float(), dim=-1)[..., 1].cpu()
        return [probabilities[row, e.answer_start: e.length].tolist() for row, e in enumerate(batch)]

    def assess_encoded(self, batch: Sequence[EncodedAnswer]) -> list[Assessment]:
        if not batch:
            return []
        out = []
        for e, probabilities in zip(batch, self.token_probabilities(batch)):
            answer_probabilities = [p for p, (s, t) in zip(probabilities, e.offsets) if s != t]
            if not answer_probabilities:
                out.append(Assessment(None))
                continue
            out.append(Assessment(1.0 - max(answer_probabilities), tuple(spans_of(probabilities, e.offsets, e.answer))))
        return out

    def assess(self, premise: str | Sequence[str], hypothesis: str, question: str | None = None) -> Assessment:
        return self.assess_encoded([self.encode(premise, hypothesis, question)])[0]

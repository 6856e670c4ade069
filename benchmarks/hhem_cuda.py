"""HHEM's CUDA path, checked once on a GPU machine: agreement with the CPU, and throughput.

No machine here reaches the hub, so HHEM's weights are not at hand. The check builds a model of
HHEM-2.1-Open's architecture (flan-t5-base's encoder as a ``T5ForTokenClassification``, 2
labels) with seeded random weights, writes it in the layout ``rag-monitor models pull hhem``
produces, and loads it through the real loader (``HHEMScorer.load``) with each device and
dtype. A tokenizer is trained here on the demo's CLAP NQ passages (the flan-t5 SentencePiece
model is not on disk either); pairs are 3 CLAP NQ passages against one answer sentence.

What it measures, all in one run:

- agreement: CUDA fp32 and CUDA bf16 against CPU fp32 on the same pairs (max |delta| of the
  consistency probability), so "bf16 on CUDA" is shown not to move scores materially;
- throughput: ``FaithfulnessWorker.score_pairs`` (encode + length-sorted batches under a token
  budget + forward) in pairs/s, on the CPU and on CUDA at several batch budgets, and the
  forward alone on CUDA (encoding is CPU work done before batching);
- the ratio CUDA/CPU, the figure quoted in the note (absolute rates depend on the machine).

Usage::

    python benchmarks/hhem_cuda.py --out benchmarks/results/hhem_cuda.json            # needs a GPU
    python benchmarks/hhem_cuda.py --size tiny --pairs 16 --cpu-only --out /tmp/x.json # smoke run
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rag_monitor.faithfulness.hhem import HHEM_PROMPT, HHEMScorer  # noqa: E402
from rag_monitor.faithfulness.worker import FaithfulnessWorker, Pair  # noqa: E402

PASSAGES = ROOT / "rag_monitor" / "demo" / "data" / "clapnq_subset.jsonl"
SIZES = {
    # flan-t5-base, as HHEM-2.1-Open's foundation config has it.
    "base": dict(d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_heads=12, vocab_size=32128),
    "tiny": dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=2000),
}


def _passages() -> list[dict]:
    return [json.loads(line) for line in PASSAGES.read_text(encoding="utf-8").splitlines() if line.strip()]


def _train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.Unigram())  # T5's kind of tokenizer; <pad>=0, </s>=1, <unk>=2 as in T5
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    raw.train_from_iterator(texts, trainer=trainer)
    raw.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def build_model(directory: Path, size: str, seed: int = 0) -> Path:
    """Write an HHEM-layout directory with seeded random weights of ``size``'s architecture."""
    import torch
    from safetensors.torch import save_file
    from transformers import T5Config, T5ForTokenClassification

    foundation = directory / "foundation"
    foundation.mkdir(parents=True, exist_ok=True)
    texts = [p["text"] for p in _passages()] + [HHEM_PROMPT]
    tokenizer = _train_tokenizer(texts, min(8000, SIZES[size]["vocab_size"]))
    tokenizer.save_pretrained(foundation)
    T5Config(**SIZES[size], feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
             tie_word_embeddings=False).save_pretrained(foundation)
    torch.manual_seed(seed)
    model = T5ForTokenClassification(T5Config.from_pretrained(foundation, num_labels=2)).eval()
    with torch.no_grad():  # keep the random classifier's probabilities away from 0 and 1
        model.classifier.weight.mul_(0.05)
    state = {f"t5.{k}": v.contiguous() for k, v in model.state_dict().items()
             if k != "transformer.encoder.embed_tokens.weight"}
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({
        "foundation": "google/flan-t5-base", "id2label": {"0": "hallucinated", "1": "consistent"}, "prompt": HHEM_PROMPT,
    }), encoding="utf-8")
    return directory


def make_pairs(n: int, seed: int = 0) -> list[Pair]:
    """``n`` pairs: 3 CLAP NQ passages (cut to ~50 words each, ~300 tokens a pair) against one sentence of one of them."""
    rng = random.Random(seed)
    passages = [" ".join(p["text"].split()[:50]) for p in _passages()]
    pairs = []
    for i in range(n):
        contexts = rng.sample(passages, 3)
        sentences = [s for s in contexts[0].split(" . ") if len(s.split()) > 4] or [contexts[0]]
        pairs.append(Pair(key=f"p{i}", contexts=contexts, answer=rng.choice(sentences)))
    return pairs


def _rate(worker: FaithfulnessWorker, pairs: list[Pair], *, sync) -> tuple[float, list[float | None]]:
    start = time.perf_counter()
    scores = worker.score_pairs(pairs)
    sync()
    elapsed = time.perf_counter() - start
    return len(pairs) / elapsed, [s.value for s in scores]


def _max_delta(a: list[float | None], b: list[float | None]) -> float:
    return max(abs(x - y) for x, y in zip(a, b) if x is not None and y is not None)


def run(size: str, n_pairs: int, cpu_only: bool, cpu_threads: int) -> dict:
    import tempfile

    import torch

    cuda = torch.cuda.is_available() and not cpu_only
    if not cpu_only and not cuda:
        raise SystemExit("no CUDA device is visible: run with --cpu-only for a smoke run")
    pairs = make_pairs(n_pairs)
    agreement_pairs = pairs[: min(256, n_pairs)]
    result: dict = {"size": size, "pairs": n_pairs, "python": platform.python_version(), "torch": torch.__version__,
                    "cpu_threads": cpu_threads}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp), size)
        cpu = HHEMScorer.load(model_dir, device="cpu", torch_threads=cpu_threads)
        lengths = [cpu.encode(list(p.contexts), p.answer).length for p in agreement_pairs]
        result["mean_tokens"] = round(sum(lengths) / len(lengths), 1)
        cpu_rate, cpu_scores = _rate(FaithfulnessWorker(cpu), agreement_pairs, sync=lambda: None)
        result["cpu_fp32_pairs_per_s"] = round(cpu_rate, 2)
        if not cuda:
            result["device"] = "cpu"
            return result
        result["device"] = torch.cuda.get_device_name(0)
        sync = torch.cuda.synchronize
        gpu32 = HHEMScorer.load(model_dir, device="cuda", dtype="float32")
        gpu16 = HHEMScorer.load(model_dir, device="auto")  # auto: CUDA, bf16
        result["auto_device"], result["auto_dtype"] = gpu16.device, str(next(gpu16.model.parameters()).dtype)
        _, fp32_scores = _rate(FaithfulnessWorker(gpu32), agreement_pairs, sync=sync)
        _, bf16_scores = _rate(FaithfulnessWorker(gpu16), agreement_pairs, sync=sync)
        result["agreement_pairs"] = len(agreement_pairs)
        result["max_abs_delta_cuda_fp32_vs_cpu_fp32"] = _max_delta(fp32_scores, cpu_scores)
        result["max_abs_delta_cuda_bf16_vs_cpu_fp32"] = _max_delta(bf16_scores, cpu_scores)
        result["score_spread_cpu"] = max(cpu_scores) - min(cpu_scores)
        result["verdict_flips_bf16_at_0_5"] = sum((a >= 0.5) != (b >= 0.5) for a, b in zip(cpu_scores, bf16_scores))
        budgets = []
        for batch_tokens, max_batch in ((8192, 32), (65536, 256), (131072, 512)):
            worker = FaithfulnessWorker(gpu16, batch_tokens=batch_tokens, max_batch=max_batch)
            _rate(worker, pairs[:512], sync=sync)  # warm-up: kernels, allocator
            rate, _ = _rate(worker, pairs, sync=sync)
            encoded = [gpu16.encode(list(p.contexts), p.answer) for p in pairs]
            start = time.perf_counter()
            for batch in worker.plan_batches([e.length for e in encoded]):
                gpu16.score_encoded([encoded[b] for b in batch])
            sync()
            forward = len(pairs) / (time.perf_counter() - start)
            budgets.append({"batch_tokens": batch_tokens, "max_batch": max_batch,
                            "end_to_end_pairs_per_s": round(rate, 1), "forward_pairs_per_s": round(forward, 1)})
        result["cuda_bf16"] = budgets
        best = max(b["end_to_end_pairs_per_s"] for b in budgets)
        result["cuda_over_cpu_end_to_end"] = round(best / cpu_rate, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--pairs", type=int, default=8192)
    parser.add_argument("--cpu-only", action="store_true")
    parser.add_argument("--cpu-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = run(args.size, args.pairs, args.cpu_only, args.cpu_threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

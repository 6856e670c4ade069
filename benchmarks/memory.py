"""The agent's memory right after start, per configuration: which scorer and whether drift runs.

Each configuration starts ``rag-monitor agent`` in a process of its own (SQLite store in a fresh
data directory, torch on one thread), waits for ``/readyz``, lets it settle and samples its RSS
(the process's resident set, children excluded) for a few seconds; the figure is the highest
sample. Then it sends 40 queries through the SDK, waits for the drift feed and scoring jobs and
samples again (``rss_mb_after_traffic``): models some configurations load on first use show
there. Configurations:

- ``lexical``: ``offline_scorer: lexical``, no drift detectors (no torch, no model);
- ``support``: the default offline scorer ``support-v1`` (torch and the shipped MiniLM), no drift;
- ``hhem``: ``hhem_model_path`` set, no drift. HHEM-2.1-Open's weights cannot be fetched here (no
  model hub), so the script writes a stand-in of the same architecture and size (HHEM's T5 encoder
  with flan-t5-base shapes: 12 layers, d_model 768, a 32,128-token vocabulary, about 110M
  parameters in fp32, as the agent loads them on CPU) with random weights and a small trained
  tokenizer; memory depends on the shapes, not the values. ``--tiny`` uses a two-layer model;
- ``lexical_drift`` and ``support_drift``: the same with the shipped drift profiles (the embedding
  model for query-embedding drift).

    python benchmarks/memory.py            # about 5 minutes on 2 cores -> benchmarks/results/memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "memory.json"
FLAN_T5_BASE = dict(d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_decoder_layers=12, num_heads=12, vocab_size=32128)
TINY = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_hhem_stand_in(directory: Path, sizes: dict) -> int:
    """A model in the layout ``rag-monitor models pull hhem`` writes, random weights; its parameter count."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForTokenClassification

    from rag_monitor.faithfulness.hhem import HHEM_PROMPT

    foundation = directory / "foundation"
    foundation.mkdir(parents=True)
    raw = Tokenizer(models.Unigram())
    raw.pre_tokenizer, raw.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    corpus = ["The Eiffel Tower is in Paris, built in 1889.", "The capital of Australia is Canberra.", HHEM_PROMPT] * 5
    raw.train_from_iterator(corpus, trainer=trainers.UnigramTrainer(vocab_size=200, special_tokens=["<pad>", "</s>", "<unk>"],
                                                                    unk_token="<unk>"))
    raw.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="</s>", unk_token="<unk>").save_pretrained(foundation)
    config = T5Config(**{"vocab_size": 200, **sizes}, feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0, tie_word_embeddings=False)
    config.save_pretrained(foundation)
    model = T5ForTokenClassification(T5Config.from_pretrained(foundation, num_labels=2)).eval()
    state = {f"t5.{k}": v.contiguous() for k, v in model.state_dict().items() if k != "transformer.encoder.embed_tokens.weight"}
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["HHEMv2ForSequenceClassification"], "foundation": "google/flan-t5-base",
        "id2label": {"0": "hallucinated", "1": "consistent"}, "model_type": "HHEMv2Config", "prompt": HHEM_PROMPT,
    }))
    count = sum(p.numel() for p in model.parameters())
    del model, state
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return count


def measure(name: str, settings: dict, work: Path, settle_s: float, sample_s: float) -> dict:
    import psutil

    data_dir = work / name
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAG_MONITOR_DATA_DIR=str(data_dir), RAG_MONITOR_OTLP_PORT=str(otlp_port := free_port()),
               RAG_MONITOR_HTTP_PORT=str(http_port := free_port()), RAG_MONITOR_TORCH_THREADS="1",
               **{f"RAG_MONITOR_{k.upper()}": str(v) for k, v in settings.items()})
    log = open(work / f"{name}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "rag_monitor.cli", "agent"], env=env, stdout=log, stderr=subprocess.STDOUT)
    started = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name}: the agent exited: {(work / f'{name}.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - started > 300:
                raise RuntimeError(f"{name}: not ready within 300 s")
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        ps = psutil.Process(proc.pid)
        time.sleep(settle_s)
        samples = rss_samples(ps, sample_s)
        send_queries(f"http://127.0.0.1:{otlp_port}", 40)
        time.sleep(settle_s)
        after = rss_samples(ps, sample_s)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as r:
            scorer = next((line for line in r.read().decode().splitlines() if line.startswith("rag_scorer_info{")), "")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # a scoring batch in progress: its result is not wanted
            proc.kill()
            proc.wait(30)
        log.close()
    return {"settings": settings, "ready_s": round(ready_s, 1), "rss_mb": round(max(samples), 1),
            "rss_mb_min": round(min(samples), 1), "rss_mb_after_traffic": round(max(after), 1), "scorer_info": scorer}


def rss_samples(ps, seconds: float) -> list[float]:
    samples, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(ps.memory_info().rss / 2**20)
        time.sleep(0.25)
    return samples


def send_queries(endpoint: str, n: int) -> None:
    import rag_monitor

    monitor = rag_monitor.init(service_name="memory-benchmark", endpoint=endpoint, release="r1", schedule_delay_s=0.2)
    try:
        for i in range(n):
            with monitor.query(f"How do I cancel plan number {i}?", session_id=f"s{i}", intent="billing") as q:
                with q.retrieve() as r:
                    r.documents([{"id": f"doc-{i}", "content": "Cancel under Settings > Billing. Refunds take 5 days.", "score": 0.8}])
                q.answer("Open Settings, then Billing, and choose Cancel.")
        if not monitor.force_flush(30):
            raise RuntimeError("the queries were not all exported")
    finally:
        monitor.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the tests' two-layer HHEM stand-in instead of the full-size one")
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rag-monitor-memory-") as tmp:
        work = Path(tmp)
        hhem_dir = work / "hhem"
        parameters = write_hhem_stand_in(hhem_dir, TINY if args.tiny else FLAN_T5_BASE)
        sampling = work / "sampling.yaml"
        sampling.write_text("base_rate: 1.0\n")  # every query sampled, so the scorer runs on them
        configs = {
            "lexical": {"offline_scorer": "lexical", "detector_profiles": "", "hhem_model_path": ""},
            "support": {"offline_scorer": "support", "detector_profiles": "", "hhem_model_path": ""},
            "hhem": {"offline_scorer": "support", "detector_profiles": "", "hhem_model_path": str(hhem_dir)},
            "lexical_drift": {"offline_scorer": "lexical", "detector_profiles": "default", "hhem_model_path": ""},
            "support_drift": {"offline_scorer": "support", "detector_profiles": "default", "hhem_model_path": ""},
        }
        results = {}
        for name, settings in configs.items():
            results[name] = measure(name, {**settings, "sampling_config": str(sampling)}, work, args.settle_s, args.sample_s)
            results[name]["settings"] = {k: ("<stand-in>" if k == "hhem_model_path" and v else v) for k, v in settings.items()}
            results[name]["settings"]["sampling_config"] = "base_rate: 1.0"
            r = results[name]
            print(f"{name}: {r['rss_mb']:.0f} MB RSS at start ({r['ready_s']} s), {r['rss_mb_after_traffic']:.0f} MB after traffic", flush=True)
    import torch

    report = {
        "script": "benchmarks/memory.py",
        "command": "python benchmarks/memory.py" + (" --tiny" if args.tiny else ""),
        "python": platform.python_version(), "torch": torch.__version__, "machine": f"{os.cpu_count()} cores",
        "hhem_weights": "stand-in: random weights, " + ("the tests' tiny model" if args.tiny else "flan-t5-base shapes"),
        "hhem_parameters": parameters,
        "configurations": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

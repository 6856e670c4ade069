"""HHEM loading and scoring, on a tiny random-weight T5 written in HHEM-2.1-Open's layout.

No package ships HHEM's weights and the hub is unreachable, so the test builds what the real
checkpoint looks like: HHEM's ``config.json`` (prompt, foundation), ``model.safetensors`` with
``t5.``-prefixed keys and no ``encoder.embed_tokens`` (tied to ``shared``), and a
``foundation/`` folder with a T5 config and a tokenizer trained here. It then loads it through
the real loader and checks the scores against HHEM's own ``predict`` recipe.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from rag_monitor.faithfulness import (  # noqa: E402
    FALLBACK_WARNING,
    FaithfulnessWorker,
    HHEMScorer,
    LexicalScorer,
    ModelLoadError,
    Pair,
    load_scorer,
)
from rag_monitor.faithfulness.hhem import HHEM_PROMPT, resolve_device, resolve_dtype  # noqa: E402
from rag_monitor.faithfulness.pull import pull_hhem  # noqa: E402

CORPUS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, built in 1889.",
    "Cheerleading is an activity wherein the participants cheer for their team as encouragement.",
    "Crayola began with chalk, then crayons, followed later by colored pencils and markers.",
    "The capital of Australia is Canberra, not Sydney as many people believe.",
    "Competitive routines typically range from one to three minutes and contain tumbling and stunts.",
    "Determine if the hypothesis is true given the premise? Premise: Hypothesis:",
    "The garment is associated with the college culture of the Roaring Twenties.",
] * 3


def _train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    # T5's order of special tokens: <pad>=0, </s>=1, <unk>=2.
    raw = Tokenizer(models.Unigram())
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    raw.train_from_iterator(CORPUS, trainer=trainer)
    raw.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def _write_tiny_hhem(directory: Path, *, seed: int = 0) -> tuple[Path, object, object]:
    """Write a tiny model in the layout ``models pull hhem`` produces; return (dir, model, tokenizer)."""
    from safetensors.torch import save_file
    from transformers import T5Config, T5ForTokenClassification

    foundation = directory / "foundation"
    foundation.mkdir(parents=True)
    tokenizer = _train_tokenizer()
    tokenizer.save_pretrained(foundation)
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                      tie_word_embeddings=False)
    config.save_pretrained(foundation)
    torch.manual_seed(seed)
    model = T5ForTokenClassification(T5Config.from_pretrained(foundation, num_labels=2)).eval()
    with torch.no_grad():  # spread the random classifier's outputs so scores differ between pairs
        model.classifier.weight.mul_(0.05)
    state = {f"t5.{k}": v.contiguous() for k, v in model.state_dict().items() if k != "transformer.encoder.embed_tokens.weight"}
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["HHEMv2ForSequenceClassification"],
        "auto_map": {"AutoConfig": "configuration_hhem_v2.HHEMv2Config",
                     "AutoModelForSequenceClassification": "modeling_hhem_v2.HHEMv2ForSequenceClassification"},
        "foundation": "google/flan-t5-base",
        "id2label": {"0": "hallucinated", "1": "consistent"},
        "model_type": "HHEMv2Config",
        "prompt": HHEM_PROMPT,
    }), encoding="utf-8")
    return directory, model, tokenizer


@pytest.fixture(scope="module")
def tiny_hhem(tmp_path_factory):
    torch.set_num_threads(1)
    return _write_tiny_hhem(tmp_path_factory.mktemp("hhem"))


@pytest.fixture(scope="module")
def scorer(tiny_hhem):
    return HHEMScorer.load(tiny_hhem[0])


PAIRS = [
    (["The Eiffel Tower is in Paris, built in 1889."], "The tower was built in 1889."),
    (["The capital of Australia is Canberra."], "Sydney is the capital of Australia."),
    (["Crayola began with chalk.", "Then crayons, followed later by colored pencils and markers and paints."], "Crayola made crayons."),
    (["Cheerleading is an activity wherein the participants cheer for their team as a form of encouragement, "
      "and competitive routines typically range from one to three minutes."], "Routines last one to three minutes."),
    ([""], "The garment is associated with the Roaring Twenties."),
]


def _hhem_predict_reference(model, tokenizer, pairs):
    """HHEM's own ``predict``: prompt, pad the batch, softmax at position 0, class 1."""
    texts = [HHEM_PROMPT.format(text1="\n\n".join(p), text2=h) for p, h in pairs]
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**inputs).logits[:, 0, :]
    return torch.softmax(logits, dim=-1)[:, 1].tolist()


def test_loads_hhem_layout_natively_and_matches_hhem_predict(tiny_hhem, scorer):
    _, model, tokenizer = tiny_hhem
    assert type(scorer.model).__name__ == "T5ForTokenClassification"
    assert scorer.prompt == HHEM_PROMPT
    assert all(p.device.type == "cpu" for p in scorer.model.parameters())
    assert scorer.model.transformer.encoder.embed_tokens.weight is scorer.model.transformer.shared.weight
    premises = [[d for d in p if d] for p, _ in PAIRS]
    got = scorer.score(premises, [h for _, h in PAIRS])
    expected = _hhem_predict_reference(model, tokenizer, [(p, h) for p, (_, h) in zip(premises, PAIRS)])
    assert got == pytest.approx(expected, abs=1e-5)
    assert all(0.0 <= s <= 1.0 for s in got)
    assert max(got) - min(got) > 1e-3, "distinct pairs should not all score the same"
    # The prompt starts with <pad>, as HHEM's: the first position is the pad token.
    assert scorer.encode(["a"], "b").input_ids[0] == tokenizer.pad_token_id


def test_batching_does_not_change_scores(scorer):
    premises, hypotheses = [p for p, _ in PAIRS], [h for _, h in PAIRS]
    single = [scorer.score([p], [h])[0] for p, h in zip(premises, hypotheses)]
    batched = scorer.score(premises, hypotheses)
    assert batched == pytest.approx(single, abs=1e-5)


def test_worker_buckets_by_length_and_keeps_order(scorer):
    pairs = [Pair(key=f"q{i}", contexts=p, answer=h) for i, (p, h) in enumerate(PAIRS * 3)]
    pairs.insert(4, Pair(key="refused", contexts=["anything"], answer="I cannot answer that.", refused=True))
    pairs.insert(7, Pair(key="empty", contexts=["anything"], answer="   "))
    worker = FaithfulnessWorker(scorer, batch_tokens=200, max_batch=4)
    lengths = [scorer.encode(list(p.contexts), p.answer).length for p in pairs if not p.refused and p.answer.strip()]
    batches = worker.plan_batches(lengths)
    assert len(batches) > 1
    for batch in batches:
        assert len(batch) <= 4 and len(batch) * max(lengths[i] for i in batch) <= 200 or len(batch) == 1
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))

    results = worker.score_pairs(pairs)
    assert [r.key for r in results] == [p.key for p in pairs]
    by_key = {r.key: r for r in results}
    assert by_key["refused"].status == "refused" and by_key["refused"].value is None
    assert by_key["empty"].status == "no_claims" and by_key["empty"].value is None
    scored = [r for r in results if r.status == "scored"]
    assert all(r.scorer == "hhem-2.1-open" for r in results)
    one_by_one = [scorer.score([list(p.contexts)], [p.answer])[0] for p in pairs if not p.refused and p.answer.strip()]
    assert [r.value for r in scored] == pytest.approx(one_by_one, abs=1e-5)
    assert all(r.unsupported == (r.value < scorer.threshold) for r in scored)


def test_long_contexts_keep_the_beginning_of_each_document(tiny_hhem):
    short = HHEMScorer.load(tiny_hhem[0], max_tokens=128)
    docs = ["Crayola began with chalk. " + "Then crayons followed later by colored pencils. " * 20,
            "The capital of Australia is Canberra.",
            "Cheerleading is an activity. " + "Competitive routines range from one to three minutes. " * 20]
    encoded = short.encode(docs, "Crayola made crayons.")
    assert encoded.truncated
    assert encoded.length <= 128
    text = short.tokenizer.decode(encoded.input_ids)
    for start in ("Crayola began", "The capital of Australia is Canberra.", "Cheerleading is"):
        assert start in text
    assert "Crayola made crayons." in text, "the answer is never cut when it fits in half the budget"
    assert not short.encode(["Crayola began with chalk."], "Crayola made crayons.").truncated
    (value,) = short.score([docs], ["Crayola made crayons."])
    assert 0.0 <= value <= 1.0


def test_load_scorer_picks_hhem_or_fallback_and_rejects_bad_paths(tiny_hhem, tmp_path, caplog):
    assert load_scorer(str(tiny_hhem[0])).name == "hhem-2.1-open"
    with caplog.at_level(logging.WARNING):
        fallback = load_scorer(None)
    assert fallback.name == "support-v1"
    assert FALLBACK_WARNING in caplog.text
    assert isinstance(load_scorer("", offline="lexical"), LexicalScorer)
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_scorer(str(tmp_path / "missing"))
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        load_scorer(str(tmp_path / "half"))


def test_device_auto_takes_cuda_only_when_there_is_one_and_bf16_only_on_cuda():
    assert resolve_device("auto", cuda_available=False) == "cpu"
    assert resolve_device("auto", cuda_available=True) == "cuda"
    assert resolve_device("cpu", cuda_available=True) == "cpu"
    with pytest.raises(ModelLoadError, match="no CUDA device"):
        resolve_device("cuda", cuda_available=False)
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu", cuda_available=False)
    assert resolve_dtype("auto", "cuda") == "bfloat16" and resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"


def test_cpu_is_the_default_here_and_cuda_without_a_gpu_is_an_error(tiny_hhem, scorer):
    if torch.cuda.is_available():  # pragma: no cover - the CPU path is what this machine tests
        pytest.skip("a GPU is present: auto would pick it")
    assert scorer.device == "cpu" and next(scorer.model.parameters()).dtype == torch.float32
    with pytest.raises(ModelLoadError, match="no CUDA device"):
        HHEMScorer.load(tiny_hhem[0], device="cuda")


def test_bf16_weights_score_like_fp32(tiny_hhem, scorer):
    """The dtype CUDA runs in, exercised on the CPU: same scores within bf16's precision."""
    half = HHEMScorer.load(tiny_hhem[0], device="cpu", dtype="bfloat16")
    assert next(half.model.parameters()).dtype == torch.bfloat16
    premises, hypotheses = [p for p, _ in PAIRS], [h for _, h in PAIRS]
    assert half.score(premises, hypotheses) == pytest.approx(scorer.score(premises, hypotheses), abs=0.05)


def test_checkpoint_without_t5_prefix_is_rejected(tiny_hhem, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(tiny_hhem[0], broken)
    state = load_file(str(broken / "model.safetensors"))
    save_file({k.removeprefix("t5."): v for k, v in state.items()}, str(broken / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="'t5.'-prefixed"):
        HHEMScorer.load(broken)


def test_models_pull_writes_the_layout_the_loader_reads(tiny_hhem, tmp_path):
    source = tiny_hhem[0]
    calls = []

    def fake_snapshot_download(*, repo_id, revision, local_dir, allow_patterns):
        calls.append((repo_id, tuple(allow_patterns)))
        origin = source if repo_id == "vectara/hallucination_evaluation_model" else source / "foundation"
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        for name in allow_patterns:
            if (origin / name).is_file():
                (Path(local_dir) / name).write_bytes((origin / name).read_bytes())
        return local_dir

    target = pull_hhem(tmp_path / "pulled", revision="0123456789abcdef0123", downloader=fake_snapshot_download)
    assert [c[0] for c in calls] == ["vectara/hallucination_evaluation_model", "google/flan-t5-base"]
    assert not any(name.endswith(".py") for _, names in calls for name in names), "remote code is never fetched"
    manifest = json.loads((target / "rag-monitor-model.json").read_text())
    assert manifest["hhem_revision"] == "0123456789abcdef0123"
    scorer = load_scorer(str(target))
    assert scorer.version == "0123456789ab"
    assert 0.0 <= scorer.score(["Paris."], ["Paris."])[0] <= 1.0

    def empty_download(**kwargs):
        return kwargs["local_dir"]

    with pytest.raises(RuntimeError, match="download incomplete"):
        pull_hhem(tmp_path / "empty", downloader=empty_download)


def test_importing_the_package_does_not_import_torch():
    code = ("import sys, rag_monitor.faithfulness, rag_monitor.faithfulness.pull; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_cuda_check_script_runs_its_cpu_part_through_the_real_loader(tmp_path):
    """``benchmarks/hhem_cuda.py`` (run once on a GPU machine) keeps working where there is none."""
    out = tmp_path / "hhem_cuda.json"
    done = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "benchmarks" / "hhem_cuda.py"), "--size", "tiny",
                           "--pairs", "6", "--cpu-only", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["pairs"] == 6
    assert 100 < result["mean_tokens"] <= 512 and result["cpu_fp32_pairs_per_s"] > 0

"""LettuceDetect loading and scoring, on a tiny random-weight ModernBERT token classifier written in
the layout ``models pull lettucedetect`` produces (``save_pretrained`` of the model and its fast
tokenizer, plus the manifest). No package ships LettuceDetect's weights and the hub is
unreachable; the test builds the same architecture small, loads it through the real loader and
checks the spans and scores against the ``lettucedetect`` package's own recipe
(``TransformerDetector._predict_single``, 0.2.3), rewritten here as HHEM's test rewrites ``predict``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from rag_monitor.faithfulness import FaithfulnessWorker, LettuceScorer, ModelLoadError, Pair, load_scorer  # noqa: E402
from rag_monitor.faithfulness.claims import claims_from_json, explanation  # noqa: E402
from rag_monitor.faithfulness.lettuce import QA_PROMPT, SUMMARY_PROMPT, format_prompt  # noqa: E402
from rag_monitor.faithfulness.pull import pull  # noqa: E402

CORPUS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, built in 1889.",
    "The capital of Australia is Canberra, not Sydney as many people believe.",
    "Cancel online under Settings, then Billing, then Cancel plan.",
    "Refunds reach your card within 5 working days.",
    "Briefly answer the following question: Bear in mind that your response should be strictly based on the "
    "following passages: passage In case the passages do not contain the necessary information to answer the "
    "question, please reply with: Unable to answer based on given passages. output: Summarize the following text:",
] * 3

PAIRS = [
    (["The Eiffel Tower is in Paris, built in 1889."], "The tower was built in 1889 in Sydney.", "When was the tower built?"),
    (["The capital of Australia is Canberra."], "Sydney is the capital of Australia.", "What is the capital of Australia?"),
    (["Cancel online under Settings, then Billing.", "Refunds reach your card within 5 working days."],
     "Cancel under Settings, then Billing; refunds take 5 days.", "How do I cancel?"),
    (["Refunds reach your card within 5 working days."], "Refunds take 5 working days.", None),
]


def _train_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    # ModernBERT's pair template: [CLS] A [SEP] B [SEP].
    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    raw.train_from_iterator(CORPUS, trainer=trainers.BpeTrainer(vocab_size=400, special_tokens=specials))
    raw.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def write_tiny_lettuce(directory: Path, *, seed: int = 0, bias: tuple[float, float] | None = None) -> Path:
    """A tiny ModernBERT token classifier and its tokenizer, saved as LettuceDetect's hub repo is."""
    from transformers import ModernBertConfig, ModernBertForTokenClassification

    tokenizer = _train_tokenizer()
    config = ModernBertConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, max_position_embeddings=1024, local_attention=64,
                              global_attn_every_n_layers=1, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                              bos_token_id=2, eos_token_id=3, num_labels=2,
                              id2label={0: "LABEL_0", 1: "LABEL_1"}, label2id={"LABEL_0": 0, "LABEL_1": 1})
    torch.manual_seed(seed)
    model = ModernBertForTokenClassification(config).eval()
    if bias is not None:  # a classifier that says the same for every token
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def package_recipe(model, tokenizer, passages, answer, question):
    """``TransformerDetector._predict_single`` (lettucedetect 0.2.3): spans and per-token probabilities."""
    prompt = format_prompt(passages, question)
    encoding = tokenizer(prompt, answer, truncation="only_first", max_length=4096, return_offsets_mapping=True,
                         return_tensors="pt", add_special_tokens=True)
    offsets = encoding.pop("offset_mapping")[0]
    answer_start = encoding["input_ids"].shape[1] - tokenizer(answer, add_special_tokens=False, return_tensors="pt")["input_ids"].shape[1] - 1
    with torch.no_grad():
        logits = model(input_ids=encoding["input_ids"], attention_mask=encoding["attention_mask"]).logits
    preds, probs = torch.argmax(logits, dim=-1)[0], torch.softmax(logits, dim=-1)[0]
    base = offsets[answer_start][0].item()
    spans, current, answer_probs = [], None, []
    for i in range(answer_start, preds.size(0)):
        s, e = offsets[i].tolist()
        if s == e:
            continue
        answer_probs.append(probs[i, 1].item())
        if preds[i].item() == 1:
            if current is None:
                current = {"start": s - base, "end": e - base, "confidence": probs[i, 1].item()}
            else:
                current["end"], current["confidence"] = e - base, max(current["confidence"], probs[i, 1].item())
        elif current is not None:
            spans.append(current)
            current = None
    if current is not None:
        spans.append(current)
    return [(s["start"], s["end"], answer[s["start"]:s["end"]]) for s in spans], max(answer_probs)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return write_tiny_lettuce(tmp_path_factory.mktemp("lettuce") / "model")


@pytest.fixture(scope="module")
def scorer(tiny_dir):
    return LettuceScorer.load(tiny_dir, device="cpu")


def test_the_prompts_are_the_packages():
    assert format_prompt(["a", "b"], "q?") == (
        "Briefly answer the following question:\nq?\nBear in mind that your response should be strictly based on the "
        "following 2 passages:\npassage 1: a\npassage 2: b\nIn case the passages do not contain the necessary information "
        'to answer the question, please reply with: "Unable to answer based on given passages."\noutput:')
    assert format_prompt(["a"], None) == "Summarize the following text:\npassage 1: a\noutput:"
    assert QA_PROMPT.endswith("output:") and SUMMARY_PROMPT.endswith("output:")


def test_loads_from_a_directory_and_matches_the_package_recipe(tiny_dir, scorer):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    assert type(scorer.model).__name__ == "ModernBertForTokenClassification"
    assert scorer.name == "lettucedetect" and scorer.version == "local" and scorer.threshold == 0.5
    model = AutoModelForTokenClassification.from_pretrained(tiny_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    flagged = 0
    for passages, answer, question in PAIRS:
        got = scorer.assess(passages, answer, question=question)
        spans, max_prob = package_recipe(model, tokenizer, passages, answer, question)
        assert got.value == pytest.approx(1.0 - max_prob, abs=1e-5)
        assert [(c.start, c.end, c.text) for c in got.claims] == spans
        assert all(answer[c.start:c.end] == c.text and c.verdict == "not_in_context" and c.score > 0.5 for c in got.claims)
        assert (got.value < 0.5) == bool(got.claims)  # the threshold is the package's decision
        flagged += bool(got.claims)
    assert 0 < flagged, "the random model should flag some tokens"


def test_batches_score_as_single_pairs(scorer):
    encoded = [scorer.encode(p, a, question=q) for p, a, q in PAIRS]
    batch = scorer.assess_encoded(encoded)
    for e, together in zip(encoded, batch):
        alone = scorer.assess_encoded([e])[0]
        assert together.value == pytest.approx(alone.value, abs=1e-4)
        assert [(c.start, c.end) for c in together.claims] == [(c.start, c.end) for c in alone.claims]


def test_a_classifier_sure_of_each_token_flags_the_whole_answer_or_nothing(tmp_path):
    answer = "Refunds take 5 working days."
    hallucinating = LettuceScorer.load(write_tiny_lettuce(tmp_path / "h", bias=(0.0, 3.0)), device="cpu")
    result = hallucinating.assess(["Refunds reach your card within 5 working days."], answer, question="When?")
    (span,) = result.claims
    assert (span.start, span.end, span.text) == (0, len(answer), answer)
    assert result.value == pytest.approx(1 - torch.softmax(torch.tensor([0.0, 3.0]), 0)[1].item(), abs=1e-5)
    assert explanation(result.claims).startswith("1 hallucinated span:\n- [0:28] 'Refunds take 5 working days.'")
    faithful = LettuceScorer.load(write_tiny_lettuce(tmp_path / "f", bias=(3.0, 0.0)), device="cpu")
    result = faithful.assess(["Refunds reach your card within 5 working days."], answer)
    assert result.claims == () and result.value > 0.9


def test_long_prompts_are_truncated_and_reported(tiny_dir):
    short = LettuceScorer.load(tiny_dir, device="cpu", max_tokens=96)
    encoded = short.encode(["Refunds reach your card within 5 working days. " * 40], "Refunds take 5 days.", question="When?")
    assert encoded.truncated and encoded.length == 96
    answer_ids = short.tokenizer("Refunds take 5 days.", add_special_tokens=False)["input_ids"]
    assert list(encoded.input_ids[encoded.answer_start:-1]) == answer_ids  # the answer is never cut for the prompt
    assert not short.encode(["Refunds."], "Refunds take 5 days.").truncated


def test_the_worker_and_load_scorer_pass_the_question_and_keep_the_spans(tiny_dir):
    scorer = load_scorer(None, lettucedetect_path=str(tiny_dir), device="cpu")
    assert isinstance(scorer, LettuceScorer)
    pairs = [Pair(key=f"t{i}", contexts=p, answer=a, question=q) for i, (p, a, q) in enumerate(PAIRS)]
    scores = FaithfulnessWorker(scorer).score_pairs(pairs)
    for (passages, answer, question), score in zip(PAIRS, scores):
        expected = scorer.assess(passages, answer, question=question)
        assert score.scorer == "lettucedetect" and score.value == pytest.approx(expected.value, abs=1e-4)
        assert score.claims == expected.claims and score.unsupported == (score.value < 0.5)
    # the question changes the prompt, so the scores
    with_question = scorer.assess(PAIRS[0][0], PAIRS[0][1], question=PAIRS[0][2]).value
    assert with_question != pytest.approx(scorer.assess(PAIRS[0][0], PAIRS[0][1]).value, abs=1e-7)


def test_bad_directories_and_two_scorers_are_refused_in_one_line(tmp_path, tiny_dir):
    with pytest.raises(ModelLoadError, match="not a directory"):
        LettuceScorer.load(tmp_path / "missing")
    partial = tmp_path / "partial"
    shutil.copytree(tiny_dir, partial)
    (partial / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="missing tokenizer.json"):
        LettuceScorer.load(partial)
    with pytest.raises(ValueError, match="choose one scorer"):
        load_scorer("/some/hhem", lettucedetect_path=str(tiny_dir))


def test_models_pull_writes_the_layout_and_the_version(tmp_path, tiny_dir):
    calls = []

    def downloader(repo_id, revision, local_dir, allow_patterns):
        calls.append((repo_id, allow_patterns))
        for name in allow_patterns:
            if (tiny_dir / name).is_file():
                shutil.copy(tiny_dir / name, Path(local_dir) / name)
        return local_dir

    target = pull("lettucedetect", tmp_path / "pulled", revision="0123456789abcdef", downloader=downloader)
    assert calls[0][0] == "KRLabsOrg/lettucedect-large-modernbert-en-v1"
    assert not any(p.endswith(".py") for p in calls[0][1])  # never code
    manifest = json.loads((target / "rag-monitor-model.json").read_text())
    assert manifest["model"] == "lettucedetect" and manifest["revision"] == "0123456789abcdef"
    loaded = LettuceScorer.load(target, device="cpu")
    assert loaded.version == "lettucedect-large-modernbert-en-v1@0123456789ab"
    with pytest.raises(RuntimeError, match="missing"):
        pull("lettucedetect", tmp_path / "empty", downloader=lambda **kw: kw["local_dir"])


def test_spans_survive_the_stored_json(scorer):
    from rag_monitor.faithfulness.claims import claims_json

    result = scorer.assess(*PAIRS[0][:2], question=PAIRS[0][2])
    assert claims_from_json(claims_json(result.claims)) == result.claims


def test_the_agent_scores_with_lettucedetect_when_its_directory_is_set(start_agent, tiny_dir):
    """Through the agent's own scorer: the setting selects the backend; the stored score keeps the spans,
    the annotation for Phoenix lists them, and the metrics carry the scorer's name."""
    from rag_monitor.agent.scoring import annotation_spans
    from rag_monitor.record import Document, QueryRecord
    from tests.services import wait_until

    agent = start_agent(lettucedetect_model_path=str(tiny_dir), hhem_device="cpu", score_interval_s=0.3)
    assert agent.agent.scoring.scorer.name == "lettucedetect"
    passages, answer, question = PAIRS[0]
    record = QueryRecord(trace_id="ab" * 16, root_span_id="cd" * 8, start_ns=0, end_ns=1, query=question, answer=answer,
                         delivered=[Document(f"d{i}", p) for i, p in enumerate(passages)])
    agent.store.queue.enqueue(record, stratum="base", inclusion_prob=0.5)
    wait_until(lambda: "lettucedetect" in agent.store.scores.for_trace(record.trace_id), timeout=60, what="the score")
    stored = agent.store.scores.for_trace(record.trace_id)["lettucedetect"]
    expected = LettuceScorer.load(tiny_dir, device="cpu").assess(passages, answer, question=question)
    assert stored.score == pytest.approx(expected.value, abs=1e-4) and stored.label == "unsupported"
    claims = claims_from_json(stored.claims)
    assert [(c.start, c.end, c.text) for c in claims] == [(c.start, c.end, c.text) for c in expected.claims]
    assert annotation_spans(claims)["hallucinated_spans"][0] == {
        "start": claims[0].start, "end": claims[0].end, "text": claims[0].text, "score": claims[0].score}
    wait_until(lambda: agent.metric("rag_faithfulness_scored_total", {"release": "unknown", "variant": "production",
                                                                      "scorer": "lettucedetect", "verdict": "unsupported"}) == 1,
               timeout=10, what="the scored counter")


def test_the_review_page_knows_lettucedetect_as_a_span_scorer_and_reads_its_stored_spans():
    from rag_monitor.faithfulness.claims import Claim, claims_json
    from rag_monitor.faithfulness.lettuce import LETTUCE_NAME
    from rag_monitor.review.spans import SPAN_SCORERS, _spans

    assert LETTUCE_NAME in SPAN_SCORERS
    stored = claims_json([Claim(text="Rome", verdict="not_in_context", start=4, end=8, score=0.9)])
    assert _spans(stored) == [(4, 8)] and _spans(None) == []

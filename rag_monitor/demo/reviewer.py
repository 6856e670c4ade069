"""A simulated reviewer who works the review queue through the review page's HTTP API.

It logs in with a token like a person would, claims items blind, and labels them with what a
support expert knows: which candidate documents state the current policy (relevant), whether
the answer is grounded in its contexts (faithful) and right (correct). Its labels are what
the agent's sample-based false-exclusion rate is computed from::

    reviewer = SimulatedReviewer("http://127.0.0.1:8080", token, corpus)
    reviewer.review_available(limit=20)     # -> number of items labelled

The person trying the demo logs in under another name (``HUMAN``). ``HumanQueue`` assigns
them a share of the queue before each pass of the simulated reviewer, who never sees those
items (assigned items are offered to their assignee only)::

    human = HumanQueue(agent.store)
    human.reserve()                         # then reviewer.review_available(...)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_monitor.demo.corpus import Corpus

HUMAN = "demo-reviewer"
"""The login the demo prints for the person trying the blind review."""
SIMULATED = "simulated-reviewer"

_CSRF = re.compile(r'<meta name="csrf-token" content="([^"]+)"')


class SimulatedReviewer:
    def __init__(self, base_url: str, token: str, corpus: Corpus, name: str = SIMULATED) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        # 60 s: on a loaded machine the review API answered after the 10 s this had, ending a demo run.
        self._client = httpx.Client(base_url=self.base_url, timeout=60.0, follow_redirects=True)
        self.corpus = corpus
        self._token = token
        self.name = name
        self._csrf: str | None = None
        self._questions = {q.text: q for q in (*corpus.policy_questions, *corpus.nq_questions, *corpus.unanswerable_questions)}
        self.labelled = 0
        # The background pass and the final one share this login: one server-side claim, so two
        # passes at once would both answer the same item and one gets 409 (it ended a demo run).
        self._passes = threading.Lock()

    def _login(self) -> None:
        response = self._client.post("/review/login", data={"reviewer": self.name, "token": self._token})
        match = _CSRF.search(response.text)
        if response.status_code != 200 or not match:
            raise RuntimeError(f"review login failed ({response.status_code}): is the token configured?")
        self._csrf = match.group(1)

    def _gold_contents(self, question_text: str) -> set[str]:
        """Contents of the documents that answer the question, for any tenant (the page is blind to it)."""
        question = self._questions.get(question_text)
        if question is None:
            return set()
        if question.family is None:
            return {self.corpus.by_id(i).content for i in question.gold_ids}
        return {
            d.content for d in self.corpus.documents
            if d.metadata.get("family") == question.family and not d.metadata["archived"]
        }

    def relevance_for(self, view: dict[str, Any]) -> dict[str, Any]:
        """Step one: the candidates that answer the question are relevant and gold."""
        gold = self._gold_contents(view["question"])
        keys = [c["key"] for c in view["candidates"] if c["content"] in gold]
        return {"relevant": keys, "gold": keys}

    def _grounded_share(self, answer: str, gold: set[str]) -> float:
        """Share of the answer's sentences that a current (gold) document states; 0 for a refusal."""
        sentences = [s.strip() for s in re.split(r"\s*\[\d+\]\s*", answer) if s.strip()]
        if not sentences or answer.startswith("I could not find"):
            return 0.0
        return sum(any(s in content for content in gold) for s in sentences) / len(sentences)

    def pair_labels_for(self, view: dict[str, Any]) -> dict[str, Any]:
        """A shadow pair: each answer judged against its own contexts, and the answer more of whose
        sentences the current policy states preferred."""
        gold = self._gold_contents(view["question"])
        a, b = (self._grounded_share(answer, gold) for answer in view["answers"])
        preferred = "tie" if a == b or view["answers"][0] == view["answers"][1] else ("A" if a > b else "B")
        labels: dict[str, Any] = {"preferred": preferred, "reasons": [], "note": "simulated reviewer"}
        for side, answer, contexts in zip("ab", view["answers"], view["answer_contexts"]):
            one = self.labels_for({"question": view["question"], "answer": answer, "contexts": contexts})
            labels[f"faithful_{side}"], labels[f"correct_{side}"] = one["faithful"], one["correct"]
        return labels

    def labels_for(self, view: dict[str, Any]) -> dict[str, Any]:
        """Step two: the labels a careful expert gives the answer and its contexts."""
        if "answers" in view:
            return self.pair_labels_for(view)
        gold = self._gold_contents(view["question"])
        answer = view.get("answer", "")
        contexts = " ".join(view.get("contexts", []))
        sentences = [s.strip() for s in re.split(r"\s*\[\d+\]\s*", answer) if s.strip()]
        refused = not sentences or answer.startswith("I could not find")
        cites_gold = any(content in gold for content in view.get("contexts", [])) and not refused
        labels: dict[str, Any] = {"reasons": [], "note": "simulated reviewer"}
        if refused:
            labels["refusal_appropriate"] = "no" if gold else "yes"
            labels["faithful"] = None
            labels["correct"] = None
            if gold:
                labels["reasons"] = ["incomplete"]
        else:
            labels["faithful"] = "yes" if all(s in contexts for s in sentences) else "no"
            labels["correct"] = "yes" if cites_gold else ("no" if gold else "unsure")
            if labels["correct"] == "no":
                labels["reasons"] = ["wrong"]
        return labels

    def review_available(self, limit: int = 50) -> int:
        """Claim and label up to ``limit`` items; returns how many were labelled."""
        with self._passes:
            return self._review(limit)

    def _review(self, limit: int) -> int:
        if self._csrf is None:
            self._login()
        done = 0
        headers = {"x-csrf-token": self._csrf or ""}
        while done < limit:
            response = self._client.post("/api/review/claim", headers=headers)
            if response.status_code == 204:
                break
            response.raise_for_status()
            view = response.json()
            if view["step"] == "relevance":
                step = self._client.post(f"/api/review/items/{view['item']}/relevance", json=self.relevance_for(view), headers=headers)
                step.raise_for_status()
                view = step.json()
            posted = self._client.post(f"/api/review/items/{view['item']}/labels", json=self.labels_for(view), headers=headers)
            posted.raise_for_status()
            done += 1
        self.labelled += done
        return done

    def close(self) -> None:
        self._client.close()


def is_pair(item: Any) -> bool:
    """A shadow pair stored whole (both answers); a pair still waiting for its other half is neither."""
    return item.pair_trace_id is not None and item.pair_record is not None


def choose_for_human(waiting: Sequence[Any], want_singles: int, want_pairs: int) -> list[int]:
    """Ids of the oldest waiting items that fill the human's quotas: single answers, then pairs.

    A pair whose other half has not arrived yet is left alone (it would be shown as a single).
    """
    chosen: list[int] = []
    for item in waiting:
        if is_pair(item) and want_pairs > 0:
            want_pairs -= 1
        elif item.pair_trace_id is None and want_singles > 0:
            want_singles -= 1
        else:
            continue
        chosen.append(item.id)
    return chosen


@dataclass
class HumanQueue:
    """Items kept for the person trying the demo: ``singles`` answers and ``pairs`` shadow pairs.

    Both kinds go through both steps (relevance, then the answer or pair). They come from the
    oldest waiting items, so mostly from the baseline release; the simulated reviewer still
    labels everything else, which the alerts need.
    """

    store: Any
    singles: int = 10
    pairs: int = 2
    login: str = HUMAN
    reserved_singles: int = 0
    reserved_pairs: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """The background review pass and the final one both reserve first: one at a time."""

    def reserve(self) -> int:
        """Assign waiting items to ``login`` until the quotas are met; returns how many this call."""
        with self._lock:
            return self._reserve()

    def _reserve(self) -> int:
        want_singles, want_pairs = self.singles - self.reserved_singles, self.pairs - self.reserved_pairs
        if want_singles <= 0 and want_pairs <= 0:
            return 0
        waiting = self.store.review.unassigned_waiting()
        ids = choose_for_human(waiting, want_singles, want_pairs)
        if not ids:
            return 0
        self.store.review.assign(self.login, item_ids=ids)
        pairs = sum(1 for item in waiting if item.id in set(ids) and is_pair(item))
        self.reserved_pairs += pairs
        self.reserved_singles += len(ids) - pairs
        return len(ids)

    def waiting(self) -> dict[str, int]:
        """What the human can claim now: ``items`` in all, of which ``pairs`` are shadow pairs."""
        pairs = [i for i in self.store.queue.paired_items() if i.assigned_to == self.login and i.state != "reviewed"]
        return {"items": self.store.review.claimable_count(self.login), "pairs": len(pairs)}

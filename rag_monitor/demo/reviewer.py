"""A simulated reviewer who works the review queue through the review page's HTTP API.

It logs in with a token like a person would, claims items blind, and labels them with what a
support expert knows: which candidate documents state the current policy (relevant), whether
the answer is grounded in its contexts (faithful) and right (correct). Its labels are what
the agent's sample-based false-exclusion rate is computed from::

    reviewer = SimulatedReviewer("http://127.0.0.1:8080", token, corpus)
    reviewer.review_available(limit=20)     # -> number of items labelled
"""

from __future__ import annotations

import re
from typing import Any

from rag_monitor.demo.corpus import Corpus

_CSRF = re.compile(r'<meta name="csrf-token" content="([^"]+)"')


class SimulatedReviewer:
    def __init__(self, base_url: str, token: str, corpus: Corpus, name: str = "demo-reviewer") -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(base_url=self.base_url, timeout=10.0, follow_redirects=True)
        self.corpus = corpus
        self._token = token
        self.name = name
        self._csrf: str | None = None
        self._questions = {q.text: q for q in (*corpus.policy_questions, *corpus.nq_questions, *corpus.unanswerable_questions)}
        self.labelled = 0

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
        """A shadow pair: prefer the answer more of whose sentences the current policy states."""
        gold = self._gold_contents(view["question"])
        a, b = (self._grounded_share(answer, gold) for answer in view["answers"])
        preferred = "tie" if a == b or view["answers"][0] == view["answers"][1] else ("A" if a > b else "B")
        return {"preferred": preferred, "reasons": [], "note": "simulated reviewer"}

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

"""One estimator module: no second Wilson interval or Kish effective size in the package, the
benchmarks or the oracle (``rag_monitor/estimators.py`` holds them; DESIGN.md, issue 22).

Unit tests may still compute an expected interval by hand: that is the independent check."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "rag_monitor" / "estimators.py"
SCANNED = [ROOT / "rag_monitor", ROOT / "benchmarks", ROOT / "tests" / "oracle"]

PATTERNS = {
    "a Wilson or Kish function": re.compile(r"def\s+\w*(wilson|kish|effective_size|binomial_interval)\w*\s*\(", re.I),
    "Wilson's z^2 / (4 n^2) term": re.compile(r"\b(\w+)\s*\*\s*\1\s*/\s*\(\s*4\s*\*|\*\*\s*2\s*/\s*\(\s*4\s*\*"),
    "Wilson's centre p + z^2 / 2n": re.compile(r"\b(\w+)\s*\*\s*\1\s*/\s*\(\s*2\s*\*|\*\*\s*2\s*/\s*\(\s*2\s*\*"),
    "a Kish size (sum w)^2 / sum w^2": re.compile(r"\b(\w+)\s*\*\s*\1\s*/\s*\w*(2|squares)\b|\)\s*\*\*\s*2\s*/\s*sum\s*\(|\*\*\s*2\s*/\s*self\.\w*squares"),
}


def offences(text: str) -> list[str]:
    return [name for name, pattern in PATTERNS.items() if pattern.search(text)]


def test_the_patterns_catch_the_copies_they_replaced():
    # The formulas as review/rates.py, review/shadow.py, review/stats.py and the oracle had them.
    assert offences("centre = (p + z * z / (2 * n_eff)) / denominator")
    assert offences("half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))")
    assert offences("low, high = wilson(value, w * w / w2)")
    assert offences("wilson(rate, sum(w for w, _ in pairs) ** 2 / sum(w * w for w, _ in pairs))")
    assert offences("return wilson(ratio, self.weighted_eligible**2 / self.weighted_eligible_squares)")
    assert offences("def binomial_interval(hits, n):")
    assert not offences("rate = WeightedRate.from_sums(w, wy, w2)")
    assert offences(HOME.read_text())  # the module itself has them: the scan would see a copy


def test_no_second_wilson_or_kish_implementation():
    found = []
    for base in SCANNED:
        for path in sorted(base.rglob("*.py")):
            if path == HOME:
                continue
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for name in offences(line):
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {name}: {line.strip()}")
    assert not found, "use rag_monitor.estimators instead of:\n" + "\n".join(found)

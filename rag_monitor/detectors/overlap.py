"""How much two top-k lists agree: Jaccard@k (as sets) and rank-biased overlap (as rankings).

Rank-biased overlap (Webber, Moffat and Zobel, "A similarity measure for indefinite rankings",
ACM TOIS 28(4), 2010) weighs agreement at depth d by p^(d-1): the top ranks count most. For two
top-k lists we use the paper's extrapolated form RBO_ext (its equation 32, equal depths):
identical lists score exactly 1, disjoint ones 0. With the default p = 0.9 the first 10 ranks
carry 86% of the weight (the paper's equation 21), which suits k around 10.

    >>> jaccard(["a", "b", "c"], ["a", "c", "d"])
    0.5
    >>> rbo(["a", "b", "c"], ["a", "c", "b"], p=0.5)
    0.875
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_RBO_P = 0.9


def jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    """|A ∩ B| / |A ∪ B| of the two lists' items; two empty lists agree (1.0)."""
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def rbo(a: Sequence[str], b: Sequence[str], p: float = DEFAULT_RBO_P) -> float:
    """Extrapolated rank-biased overlap of two rankings without repeated items, in [0, 1].

    A list shorter than the other is padded with items that match nothing: a document the index no
    longer returns counts as a change (the paper's uneven-length form would instead assume the
    short list's unseen tail agrees, and score a top-3 that is a prefix of a top-10 as 1.0).
    """
    if not 0 < p < 1:
        raise ValueError(f"RBO's persistence p must be within (0, 1), got {p!r}")
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        raise ValueError("RBO needs rankings without repeated items")
    if list(a) == list(b):
        return 1.0  # exactly: the sum below rounds to 0.9999999999999999
    depth = max(len(a), len(b))
    seen_a: set[str] = set()
    seen_b: set[str] = set()
    overlap = 0  # X_d: items the two prefixes of depth d share
    weighted = 0.0  # the sum over d of (X_d / d) p^d
    for d in range(1, depth + 1):
        x = a[d - 1] if d <= len(a) else None
        y = b[d - 1] if d <= len(b) else None
        if x is not None and x == y:
            overlap += 1
        else:
            overlap += (x is not None and x in seen_b) + (y is not None and y in seen_a)
        if x is not None:
            seen_a.add(x)
        if y is not None:
            seen_b.add(y)
        weighted += overlap / d * p ** d
    return min(1.0, (1 - p) / p * weighted + overlap / depth * p ** depth)

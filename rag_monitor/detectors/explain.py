"""What changed: the clusters of queries more (or less) common now than in the reference.

The matched reference and the current window are pooled and clustered (k-means on the unit
vectors, a few seeded Lloyd iterations in numpy); each cluster's share of the current window is
compared with its share of the reference. ``over`` lists clusters that grew (a new topic shows up
as a cluster that is mostly current), ``under`` those that shrank or vanished. A cluster counts
when its two-proportion z-score passes ``min_z``, so a no-drift window usually names nothing.
Examples are the trace ids nearest each cluster's centre (current items for ``over``, reference
items for ``under``); the caller turns them into redacted queries and Phoenix links.

For categorical signals the categories themselves are the clusters (``category_shifts``).
"""

from __future__ import annotations

import math
from typing import Any

N_CLUSTERS = 8
EXAMPLES = 3
MIN_Z = 3.0


def _kmeans_once(points: Any, k: int, rng: Any, iterations: int) -> tuple[Any, Any, float]:
    """One seeded Lloyd run from a k-means++ start; returns assignment, centres and the total
    cosine similarity to the nearest centre (higher is tighter)."""
    import numpy as np

    centres = [points[rng.integers(len(points))]]
    for _ in range(1, k):  # k-means++: spread the starts, so one run rarely merges two topics
        distance = np.clip(1.0 - np.max(points @ np.array(centres).T, axis=1), 0.0, None)
        weights = distance / distance.sum() if distance.sum() > 0 else None
        centres.append(points[rng.choice(len(points), p=weights)])
    centres = np.array(centres)
    for _ in range(iterations):
        assignment = np.argmax(points @ centres.T, axis=1)  # unit vectors: nearest = largest cosine
        for j in range(k):
            members = points[assignment == j]
            if len(members):
                centre = members.sum(axis=0)
                centres[j] = centre / max(float(np.linalg.norm(centre)), 1e-12)
    similarity = points @ centres.T
    return np.argmax(similarity, axis=1), centres, float(similarity.max(axis=1).sum())


def _kmeans(points: Any, k: int, rng: Any, iterations: int = 15, restarts: int = 5) -> Any:
    """The tightest of ``restarts`` runs (as scikit-learn's ``n_init``): one unlucky start would
    otherwise hide a new topic inside an old cluster."""
    runs = [_kmeans_once(points, k, rng, iterations) for _ in range(restarts)]
    assignment, centres, _ = max(runs, key=lambda run: run[2])
    return assignment, centres


def _z(a: int, n: int, b: int, m: int) -> float:
    """Two-proportion z-score of a/n (current) against b/m (reference)."""
    pooled = (a + b) / (n + m)
    spread = math.sqrt(max(pooled * (1 - pooled) * (1 / n + 1 / m), 1e-12))
    return (a / n - b / m) / spread


def cluster_shifts(reference: Any, current: Any, reference_ids: list[str], current_ids: list[str], *,
                   seed: int, n_clusters: int = N_CLUSTERS, min_z: float = MIN_Z, examples: int = EXAMPLES) -> dict:
    """``{"over": [...], "under": [...]}``, each cluster with sizes, shares, z and example trace ids."""
    import numpy as np

    pooled = np.concatenate([reference, current]).astype(np.float32)
    pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    k = max(2, min(n_clusters, len(pooled) // 20))
    assignment, centres = _kmeans(pooled, k, np.random.default_rng(seed))
    is_current = np.zeros(len(pooled), dtype=bool)
    is_current[len(reference):] = True
    ids = list(reference_ids) + list(current_ids)
    n, m = int(is_current.sum()), int((~is_current).sum())
    clusters = []
    for j in range(k):
        in_cluster = assignment == j
        a, b = int((in_cluster & is_current).sum()), int((in_cluster & ~is_current).sum())
        if a + b == 0:
            continue
        z = _z(a, n, b, m)
        side = is_current if z > 0 else ~is_current
        members = np.flatnonzero(in_cluster & side)
        nearest = members[np.argsort(-(pooled[members] @ centres[j]))[:examples]]
        clusters.append({"cluster": j, "current": a, "reference": b, "current_share": a / n,
                         "reference_share": b / m, "z": z, "examples": [ids[i] for i in nearest]})
    over = sorted((c for c in clusters if c["z"] >= min_z), key=lambda c: -c["z"])
    under = sorted((c for c in clusters if c["z"] <= -min_z), key=lambda c: c["z"])
    return {"over": over, "under": under}


def category_shifts(reference: list[str], current: list[str], *, min_z: float = MIN_Z) -> dict:
    """The same shape for categorical signals: each category is its own cluster."""
    from collections import Counter

    ref, cur = Counter(reference), Counter(current)
    n, m = max(len(current), 1), max(len(reference), 1)
    shifts = [{"cluster": str(c), "current": cur[c], "reference": ref[c], "current_share": cur[c] / n,
               "reference_share": ref[c] / m, "z": _z(cur[c], n, ref[c], m), "examples": []}
              for c in set(ref) | set(cur)]
    return {"over": sorted((s for s in shifts if s["z"] >= min_z), key=lambda s: -s["z"]),
            "under": sorted((s for s in shifts if s["z"] <= -min_z), key=lambda s: s["z"])}

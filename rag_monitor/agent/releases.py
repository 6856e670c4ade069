"""Release label values, agreed by every replica through the store.

A team that deploys daily ships a release a day, so the ``release`` label must stay bounded;
but the newest release is the one regression triage needs. Each service keeps its ``keep``
most recently first-seen releases, and each of those exports ``rag_release_info`` and
``rag_release_first_seen_timestamp_seconds``. The order comes from the store's ``releases``
table (first sighting by any replica wins), so every replica labels alike; a replica refreshes
the set when it sees a release it has not noted yet, and periodically (``refresh``) to learn of
releases only another replica saw.

``label`` is the one fold every metric family with a ``release`` label uses (query metrics,
scores, judged rates, unsupported rates, false exclusions): a release name kept by any service
is a label value, every other name is ``other``. The ``release`` label carries no service, so a
name is named or folded alike whichever service or family it comes from.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rag_monitor.alerts.metrics import OTHER, UNKNOWN, AgentMetrics

if TYPE_CHECKING:
    from rag_monitor.store.coordination import Releases


def service_key(service: str | None) -> str:
    return service or UNKNOWN


class ReleaseLabels:
    def __init__(self, metrics: AgentMetrics, keep: int, on_newest=None):
        if keep < 1:
            raise ValueError(f"the number of labelled releases must be positive, got {keep}")
        self.metrics = metrics
        self.keep = keep
        self._labelled: frozenset[str] = frozenset()
        """Release names kept by any service (the label values)."""
        self._none_recorded = False
        self._exported: dict[tuple[str, str], float] = {}
        self._noted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()
        self._on_newest = on_newest
        """``on_newest(release, first_seen, new)``: the newest release across services (a change
        event when ``new``: not at this replica's first read of the store)."""
        self._applied = False

    def label(self, release: str | None) -> str:
        """The ``release`` label value of a raw release name, in every family."""
        if not release or release == UNKNOWN:
            return UNKNOWN
        # The store records no release at all (records reviewed that never passed an agent): nothing to fold against.
        return release if release in self._labelled or self._none_recorded else OTHER

    def unnoted(self, sightings: Iterable[tuple[str | None, str]]) -> list[tuple[str, str]]:
        """``(service, release)`` pairs this replica has not recorded in the store yet."""
        return sorted({(service_key(s), r) for s, r in sightings if r} - self._noted)

    def noted(self, first_seen: dict[tuple[str, str], float]) -> None:
        """The store recorded these sightings (``IngestOutcome.first_seen``)."""
        with self._lock:
            self._noted.update(first_seen)

    def refresh(self, releases: Releases) -> None:
        """Re-read each service's newest releases from the store; export exactly those."""
        # Read and apply as one step: an older read applied after a newer one would drop a release.
        with self._refreshing:
            self.apply(releases.latest(self.keep))

    def apply(self, latest) -> None:
        """Label and export exactly ``latest`` (``Release`` rows: each service's newest)."""
        exported = {(r.service, r.release): r.first_seen for r in latest}
        m = self.metrics
        with self._lock:
            self._noted.update(exported)
            for key in self._exported.keys() - exported.keys():  # folded into `other` now
                m.release_info.remove(*key)
                m.release_first_seen.remove(*key)
            for key, first_seen in exported.items():
                if self._exported.get(key) != first_seen:
                    m.release_info.labels(*key).set(1)
                    m.release_first_seen.labels(*key).set(first_seen)
            self._exported = exported
            self._labelled = frozenset(release for _, release in exported)
            self._none_recorded = not exported
            applied, self._applied = self._applied, True
        if self._on_newest is not None and exported:
            (_, release), first_seen = max(exported.items(), key=lambda kv: (kv[1], kv[0]))
            self._on_newest(release, first_seen, applied)

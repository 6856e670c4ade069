"""One lifecycle for every long-lived part of the agent (the OTel Collector's component model).

A ``Component`` has a name, the settings it was built from, ``start()``, ``stop()`` and
``health()``. The agent builds its components from the settings (``agent/service.py``) and hands
them, in dependency order, to one ``Lifecycle``: ``start`` starts them in that order, ``stop``
stops the started ones in reverse, and a stop that raises is logged without keeping the others
from stopping. ``/readyz`` answers the lifecycle's ``report()``: every component by name with its
status, ready unless one has *failed*.

Status: ``ok``; ``degraded`` (it works but loses or delays something: a sink dropping, a job
whose last run raised; the replica still keeps every record it acknowledges, so it stays in the
load balancer); ``failed`` (the replica cannot keep what it acknowledges: the store is
unreachable, or the agent is stopped), which makes ``/readyz`` answer 503.

    lifecycle = Lifecycle([store, forwarder, *sinks, receiver, scheduler])
    lifecycle.start(); ...; lifecycle.report(); lifecycle.stop()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rag_monitor.masking import mask

log = logging.getLogger(__name__)

OK, DEGRADED, FAILED = "ok", "degraded", "failed"


@dataclass(frozen=True)
class Health:
    status: str = OK
    reason: str = ""

    def as_dict(self) -> dict[str, str]:
        """For ``/readyz``: the reason with every configured secret masked (it may quote an error)."""
        return {"status": self.status, "reason": mask(self.reason)} if self.reason else {"status": self.status}


HEALTHY = Health()
NOT_STARTED = Health(FAILED, "not started")
STOPPED = Health(FAILED, "stopped")


class Component:
    """The interface, with the bookkeeping every component shares: subclasses override
    ``_start``/``_stop``/``_health`` (each optional)."""

    def __init__(self, name: str, settings: Mapping[str, Any] | None = None):
        self.name = name
        self.settings = dict(settings or {})
        """The settings it was built from (no secrets: shown in logs and docs)."""
        self.state = "built"

    def start(self) -> None:
        if self.state == "built":
            self._start()
            self.state = "started"

    def stop(self) -> None:
        if self.state == "started":
            self.state = "stopped"
            self._stop()

    def health(self) -> Health:
        if self.state == "built":
            return NOT_STARTED
        if self.state == "stopped":
            return STOPPED
        return self._health()

    def _start(self) -> None:
        pass

    def _stop(self) -> None:
        pass

    def _health(self) -> Health:
        return HEALTHY

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.state}>"


class Part(Component):
    """A component made of callables: for parts whose class predates the interface (the store,
    the probe runner, the Phoenix forwarder) or lives where the agent must not reach in."""

    def __init__(self, name: str, *, start: Callable[[], None] | None = None, stop: Callable[[], None] | None = None,
                 health: Callable[[], Health] | None = None, settings: Mapping[str, Any] | None = None):
        super().__init__(name, settings)
        self._on_start, self._on_stop, self._on_health = start, stop, health

    def _start(self) -> None:
        if self._on_start is not None:
            self._on_start()

    def _stop(self) -> None:
        if self._on_stop is not None:
            self._on_stop()

    def _health(self) -> Health:
        return self._on_health() if self._on_health is not None else HEALTHY


@dataclass
class Lifecycle:
    components: list[Component] = field(default_factory=list)
    """In dependency order: each may use those before it, so it starts after and stops before them."""

    def __post_init__(self):
        self._lock = threading.Lock()
        self.started: list[Component] = []
        """In the order they started (stop walks it backwards)."""
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise ValueError(f"component names repeat: {sorted(n for n in names if names.count(n) > 1)}")

    def add(self, components: Iterable[Component]) -> None:
        for component in components:
            if any(c.name == component.name for c in self.components):
                raise ValueError(f"component {component.name!r} is declared twice")
            self.components.append(component)

    def start(self, until: str | None = None) -> None:
        """Start, in order, those not started yet (up to and excluding ``until``); when one raises,
        the ones this call started are stopped again and the error goes up."""
        with self._lock:
            begun = len(self.started)
            for component in self.components:
                if component.name == until:
                    break
                if component in self.started:
                    continue
                try:
                    component.start()
                except BaseException:
                    self._stop(self.started[begun:])
                    del self.started[begun:]
                    raise
                self.started.append(component)

    def stop(self) -> list[str]:
        """Stop the started components in reverse order; returns the names whose stop raised."""
        with self._lock:
            failed = self._stop(self.started)
            self.started.clear()
            return failed

    @staticmethod
    def _stop(components: list[Component]) -> list[str]:
        failed = []
        for component in reversed(components):
            try:
                component.stop()
            except Exception:  # noqa: BLE001 - one bad stop must not keep the rest running
                failed.append(component.name)
                log.exception("stopping %s failed; stopping the others", component.name)
        return failed

    def health(self) -> dict[str, Health]:
        out = {}
        for component in self.components:
            try:
                out[component.name] = component.health()
            except Exception as exc:  # noqa: BLE001 - a health check that raises is the answer
                out[component.name] = Health(FAILED, f"health check raised {type(exc).__name__}: {exc}")
        return out

    def report(self) -> tuple[bool, dict]:
        """(ready, body): ready when none failed; the body names every component and its status."""
        health = self.health()
        statuses = {h.status for h in health.values()}
        overall = FAILED if FAILED in statuses or not health else DEGRADED if DEGRADED in statuses else OK
        return overall != FAILED, {"status": overall, "components": {name: h.as_dict() for name, h in health.items()}}

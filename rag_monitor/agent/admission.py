"""The OTLP receiver's body-reading slots: a share per client, and a way past them for bodies
that are already here.

A body is read into memory in a slot (at most ``capacity`` at once, bounding memory) within the
read deadline, so a client trickling bytes holds its slot until then. Two rules keep slow
clients from refusing everyone else:

- a share per client: one client (an address, or the forwarded one behind a trusted proxy) holds
  at most ``share`` slots at once, so filling the pool takes several clients;
- when every slot is taken, a body that arrives at once (within ``express_s``) is read in one of
  as many express slots: a well-behaved exporter sends its body with its headers, so any number of
  tricklers, from any number of addresses, cannot keep it out. A trickler given an express slot
  is refused on its first chunk (a few bytes with more to come; ``http._read_at_once``), or after
  ``express_s`` when nothing comes, so tricklers hardly ever hold one.

Usage (in the event loop)::

    slots = ReadingSlots(64, share=16, express_s=0.25)
    kind = slots.acquire("203.0.113.9")   # "slot", "express" or None (refused)
    ...
    slots.release("203.0.113.9", kind)
"""

from __future__ import annotations

SLOT = "slot"
EXPRESS = "express"


class ReadingSlots:
    """Not thread-safe: used from the server's event loop only."""

    def __init__(self, capacity: int, share: int | None = None, express_s: float = 0.25):
        if capacity < 1:
            raise ValueError(f"max_reading_requests must be at least 1, got {capacity}")
        self.capacity = capacity
        self.share = max(1, capacity // 4) if share is None else share
        self.express_s = express_s
        self._held: dict[str, int] = {}
        self._count = 0
        self._express = 0

    def held_by(self, client: str) -> int:
        return self._held.get(client, 0)

    def acquire(self, client: str) -> str | None:
        """A slot; an express slot when the pool is full (the body must then arrive within
        ``express_s``); None when the client holds its share already, or express slots are full too."""
        if self.held_by(client) >= self.share:
            return None
        if self._count < self.capacity:
            self._held[client] = self.held_by(client) + 1
            self._count += 1
            return SLOT
        if self._express < self.capacity:
            self._express += 1
            return EXPRESS
        return None

    def release(self, client: str, kind: str) -> None:
        if kind == EXPRESS:
            self._express -= 1
            return
        self._count -= 1
        left = self._held[client] - 1
        if left:
            self._held[client] = left
        else:
            del self._held[client]

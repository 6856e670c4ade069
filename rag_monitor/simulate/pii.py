"""Seeded personal data for the simulator: every value it hands out is remembered, so a test can
search every sink for each one (no seeded string may reach the store, logs, metrics or exports)."""

from __future__ import annotations

import random


def _luhn_complete(digits: str) -> str:
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d)
        if i % 2 == 0:
            n = n * 2 - 9 if n * 2 > 9 else n * 2
        total += n
    return digits + str((10 - total % 10) % 10)


class PII:
    """Factory of distinct, realistic PII strings (e-mail, phone, card, IBAN, IP address)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.values: set[str] = set()
        self._n = 0

    def _keep(self, value: str) -> str:
        self.values.add(value)
        return value

    def email(self, rng: random.Random) -> str:
        self._n += 1
        return self._keep(f"{rng.choice(('jane', 'omar', 'li', 'ana'))}.{self.seed}x{self._n}@example-mail.com")

    def phone(self, rng: random.Random) -> str:
        return self._keep(f"+44 20 7{rng.randrange(100, 999)} {rng.randrange(1000, 9999)}")

    def card(self, rng: random.Random) -> str:
        digits = _luhn_complete("4" + "".join(str(rng.randrange(10)) for _ in range(14)))
        return self._keep(" ".join(digits[i:i + 4] for i in range(0, 16, 4)))

    def iban(self, rng: random.Random) -> str:
        bban = f"BARC{rng.randrange(10**13, 10**14)}"
        digits = "".join(str(int(c, 36)) for c in bban + "GB00")
        return self._keep(f"GB{98 - int(digits) % 97:02d}{bban}")

    def ip(self, rng: random.Random) -> str:
        return self._keep(f"203.0.113.{rng.randrange(1, 254)}")

    def any(self, rng: random.Random) -> str:
        return rng.choice((self.email, self.phone, self.card, self.iban, self.ip))(rng)

    def sentence(self, rng: random.Random) -> str:
        return rng.choice((
            "My e-mail is {}.", "Call me on {}.", "My card is {}.", "Pay into {}.", "I was on {}.",
        )).format(rng.choice((self.email, self.phone, self.card, self.iban, self.ip))(rng))

    def needles(self) -> set[str]:
        """What to search sinks for: each value, and a card's digits without spaces."""
        out = set(self.values)
        out.update(v.replace(" ", "") for v in self.values if v.replace(" ", "").isdigit())
        return out

"""Jinja2 rendering for every HTML page and report: one environment per package, autoescaped.

Usage::

    html = render("rag_monitor.review", "review.html", reviewer=name, csrf=token)

Templates live in a ``templates/`` folder inside the named package, so they ship in the wheel.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2


@lru_cache(maxsize=None)
def environment(package: str) -> jinja2.Environment:
    """The autoescaping environment for ``package``'s ``templates/`` folder (built once)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(package: str, name: str, **context: Any) -> str:
    """Render ``templates/name`` of ``package`` with ``context``; missing variables raise."""
    return environment(package).get_template(name).render(**context)

"""Every link the demo prints answers 200 from the real servers it names (Debian's Prometheus
2.42 has no `/alerts`, Debian's Alertmanager no web UI: the demo prints what works there)."""

from __future__ import annotations

import urllib.request

import pytest

from rag_monitor.demo.links import demo_links, link_url
from rag_monitor.demo.services import AlertingStack
from tests.services import require

pytestmark = pytest.mark.integration


def test_every_printed_link_answers(tmp_path, start_agent):
    require(AlertingStack.available(), "prometheus and prometheus-alertmanager binaries")
    agent = start_agent()
    with AlertingStack(tmp_path / "alerting", [f"127.0.0.1:{agent.agent.settings.http_port}"]) as alerting:
        links = demo_links(agent.agent, alerting, "", "token")
        assert set(links) == {"metrics", "review", "prometheus", "alertmanager"}
        for name, link in links.items():
            with urllib.request.urlopen(link_url(link), timeout=10) as r:
                assert r.status == 200, (name, link)
                body = r.read()
            if name == "alertmanager" and "/api/v2/alerts" in link:
                assert body.startswith(b"["), body[:200]  # the API's alert list, and amtool is named
                assert "amtool --alertmanager.url=" in link
        # The page a browser needs on this build, not the React UI's 404 on Debian's package.
        assert links["prometheus"].endswith("/alerts") and "/api/" not in links["prometheus"]

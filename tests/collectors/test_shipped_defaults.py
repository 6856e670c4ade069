"""The agent's config files ship inside the package and apply from any working directory; the
package is the one source of every shipped config file (the chart's copies are generated); a
configured file that is missing or does not parse stops the agent, naming the setting and file."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from rag_monitor.config_files import CONFIG_FILES, DEFAULTS_DIR, ConfigFileError, config_path, load_config, shipped_path
from rag_monitor.settings import AgentSettings
from tests.services import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _chart_sync():
    spec = importlib.util.spec_from_file_location("helm_sync_files", ROOT / "helm" / "sync_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped_files() -> dict[str, Path]:
    """Every shipped config file (and promtool case) by its path under ``rag_monitor/defaults``."""
    return {p.relative_to(DEFAULTS_DIR).as_posix(): p for p in sorted(DEFAULTS_DIR.rglob("*"))
            if p.is_file() and p.name != "README.md" and "__pycache__" not in p.parts}


def repository_files() -> list[Path]:
    """Tracked files and new ones git does not ignore: a copy counts before it is committed."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True, timeout=60).stdout.decode()
    return [ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()]


def test_every_shipped_config_file_has_one_source():
    """A file elsewhere in the repository that has a shipped file's content, or its path under
    ``defaults/`` (``collectors/prices.yaml``), is a second copy someone could edit: allowed only
    where ``helm/sync_files.py`` generates it from the package (and tests/deploy checks it)."""
    shipped = shipped_files()
    by_content = {path.read_bytes(): relative for relative, path in shipped.items()}
    generated = {copy.resolve(): source.resolve() for copy, source in _chart_sync().generated_copies().items()}
    copies = []
    for path in repository_files():
        if path.resolve().is_relative_to(DEFAULTS_DIR):
            continue
        relative = path.relative_to(ROOT).as_posix()
        same_name = next((name for name in shipped if relative == name or relative.endswith("/" + name)), None)
        same_content = by_content.get(path.read_bytes()) if path.stat().st_size < 1_000_000 else None
        source = same_name or same_content
        if source is not None and generated.get(path.resolve()) != shipped[source].resolve():
            copies.append(f"{relative} (a copy of rag_monitor/defaults/{source})")
    assert not copies, ("shipped config files have a second editable copy; edit them in rag_monitor/defaults and "
                        "generate the chart's copies with python helm/sync_files.py:\n" + "\n".join(copies))
    # The check sees the chart's copies at all: they are found, and each is generated.
    assert {copy for copy, source in generated.items() if source.is_relative_to(DEFAULTS_DIR)} >= {
        (ROOT / "helm" / "rag-monitor" / "files" / name).resolve() for name in CONFIG_FILES.values()}


def test_every_file_setting_defaults_to_the_shipped_copy():
    settings = AgentSettings()
    for name, relative in CONFIG_FILES.items():
        assert getattr(settings, name) == "default"
        assert config_path(name, "default") == shipped_path(name) and shipped_path(name).is_file(), relative
        assert shipped_path(name) == DEFAULTS_DIR / relative


def test_a_missing_or_broken_configured_file_names_the_setting_and_the_file(tmp_path):
    from rag_monitor.collectors.pricing import PriceTable

    with pytest.raises(ConfigFileError, match=r"price_table \(RAG_MONITOR_PRICE_TABLE\).*nope\.yaml.*not found"):
        load_config("price_table", str(tmp_path / "nope.yaml"), PriceTable.load, lambda: PriceTable([]))
    broken = tmp_path / "prices.yaml"
    broken.write_text("models: {gpt-4o: {input: [1, 2}\n")
    with pytest.raises(ConfigFileError, match=r"price_table.*prices\.yaml"):
        load_config("price_table", str(broken), PriceTable.load, lambda: PriceTable([]))
    assert load_config("price_table", "", PriceTable.load, lambda: "none") == "none"


def _wheel(tmp_path: Path, **env: str) -> set[str]:
    """The names in a wheel built from a copy of this checkout (building leaves build/ and egg-info beside the sources)."""
    import shutil

    source, out = tmp_path / "src", tmp_path / "wheel"
    shutil.copytree(ROOT / "rag_monitor", source / "rag_monitor",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))  # this checkout's build, not the wheel's
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copyfile(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
                   check=True, capture_output=True, timeout=600, env={**os.environ, **env})
    return set(zipfile.ZipFile(next(out.glob("rag_monitor-*.whl"))).namelist())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> set[str]:
    """The names in the wheel ``pip wheel`` builds here (once: compiling takes a minute or two)."""
    return _wheel(tmp_path_factory.mktemp("wheel"))


def compiled_py() -> list[str]:
    """setup.py's ``COMPILED_PY``: the pure-Python modules it compiles."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED_PY")


def test_the_wheel_carries_the_compiled_modules_and_builds_without_a_compiler(wheel, tmp_path):
    def built(names: set[str]) -> set[str]:
        return {n.split(".")[0].replace("/", ".") for n in names if n.endswith(".so")}

    sources = {m.replace(".", "/") + ".py" for m in compiled_py()}
    assert built(wheel) == {"rag_monitor.collectors.otlp.wire", *compiled_py()}
    assert sources <= wheel  # the plain Python beside each: what a build without a compiler runs
    assert not any(n.endswith((".c", ".pyx")) for n in wheel)  # Cython's output and input stay out
    without = _wheel(tmp_path / "without", CC="/bin/false")  # the extensions are optional: plain Python remains
    assert not built(without) and "rag_monitor/collectors/otlp/proto.py" in without and sources <= without


def test_the_wheel_carries_the_defaults(wheel):
    names = wheel
    config = {f"rag_monitor/defaults/{relative}" for relative in shipped_files() if not relative.startswith("alerts/tests/")}
    assert {f"rag_monitor/defaults/{relative}" for relative in CONFIG_FILES.values()} <= config
    assert {"rag_monitor/defaults/alerts/thresholds.yaml", "rag_monitor/defaults/alerts/rules/cost.yml",
            "rag_monitor/defaults/collectors/otelcol-gateway.yaml"} <= config
    assert config <= names  # the agent's files, the gateway's, the alert rules and thresholds
    assert not any(name.startswith("rag_monitor/defaults/alerts/tests/") for name in names)  # promtool cases stay in the repo


def _start(tmp_path: Path, **settings: str) -> tuple[subprocess.Popen, Path, dict[str, str]]:
    cwd = tmp_path / "empty"
    cwd.mkdir(exist_ok=True)
    log = tmp_path / "agent.log"
    ports = {"otlp": free_port(), "http": free_port()}
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAG_MONITOR_DATA_DIR=str(tmp_path / "data"), RAG_MONITOR_HHEM_MODEL_PATH="",
               RAG_MONITOR_OTLP_PORT=str(ports["otlp"]), RAG_MONITOR_HTTP_PORT=str(ports["http"]), HF_HUB_OFFLINE="1",
               **{f"RAG_MONITOR_{k.upper()}": v for k, v in settings.items()})
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "rag-monitor"), "agent"], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    return proc, log, {k: f"http://127.0.0.1:{v}" for k, v in ports.items()}


def test_a_missing_configured_file_stops_the_agent_at_start(tmp_path):
    proc, log, _ = _start(tmp_path, price_table="collectors/prices.yaml")  # relative to an empty cwd
    assert proc.wait(timeout=120) != 0
    text = log.read_text()
    assert "price_table" in text and "collectors/prices.yaml" in text and "not found" in text


@pytest.mark.slow
def test_agent_started_from_an_empty_directory_prices_detects_drift_and_redacts(tmp_path):
    import rag_monitor
    from prometheus_client.parser import text_string_to_metric_families

    proc, log, urls = _start(tmp_path)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"agent exited: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(urls["http"] + "/readyz", timeout=1) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_until(ready, timeout=120, what="the agent started from an empty directory")
        monitor = rag_monitor.init(service_name="svc", endpoint=urls["otlp"], release="r1")
        try:
            with monitor.query("My e-mail is jane.doe@example.com, how do I cancel?", session_id="s1") as q:
                with q.generate(model="gpt-4o-mini") as g:
                    g.tokens(prompt=1000, completion=10)
                q.answer("Under Settings.")
            monitor.force_flush()
        finally:
            monitor.shutdown()

        def metric(name: str, **labels: str) -> float:
            with urllib.request.urlopen(urls["http"] + "/metrics", timeout=5) as r:
                text = r.read().decode()
            return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                       if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

        wait_until(lambda: metric("rag_queries_total") == 1, timeout=30, what="the query counted")
        assert metric("rag_cost_usd_total", model="gpt-4o-mini") == pytest.approx(0.000156)  # the shipped price table
        assert metric("rag_agent_pii_redactions_total", kind="email") == 1  # the built-in rules
        assert (tmp_path / "data" / "pseudonym.key").is_file()  # no key configured: one kept in the data dir
        import yaml

        shipped = [p["name"] for p in yaml.safe_load(shipped_path("detector_profiles").read_text())["profiles"]]
        text = log.read_text()
        assert f"drift profiles: {', '.join(shipped)}" in text and "rag_monitor/defaults/detectors/profiles.yaml" in text
    finally:
        proc.terminate()
        proc.wait(timeout=60)

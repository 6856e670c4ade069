"""The README's commands and examples run as written, and its reference sections are current."""

from __future__ import annotations

import json

import hashlib
import re
import subprocess
import sys
from pathlib import Path

from rag_monitor.cli import main as cli
from rag_monitor.reference import main as reference
from tests.agents import langchain_rag_chain
from tests.services import wait_until

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_starts_with_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    assert first_block.splitlines()[0].startswith("make demo") and first_block.splitlines()[1].startswith("make test")


def test_generated_reference_sections_are_current():
    assert reference(["--check"]) == 0


def test_sdk_example_runs_as_written(running_agent):
    code = PYTHON_BLOCKS[0].replace("http://127.0.0.1:4318", running_agent.otlp_url)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    wait_until(lambda: running_agent.metric_sum("rag_feedback_total", kind="thumbs_down") == 1, timeout=10, what="the feedback")
    item = running_agent.store.review.claim("probe", 60)
    assert item is not None and item.query_record.query == "How do I cancel?" and item.stratum == "thumbs_down"


def test_openinference_example_runs_as_written(running_agent):
    from openinference.instrumentation.langchain import LangChainInstrumentor

    code = PYTHON_BLOCKS[1].replace("http://127.0.0.1:4318", running_agent.otlp_url)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
    try:
        policy = "Cancel under Settings > Billing."
        langchain_rag_chain(policy, "doc-1", policy).invoke("How do I cancel?")
        namespace["provider"].force_flush()
        wait_until(lambda: running_agent.metric_sum("rag_queries_total", release="2026.11.30") == 1, timeout=15,
                   what="the LangChain query in the agent")
        assert running_agent.metric_sum("rag_stage_duration_seconds_count", stage="retrieve") == 1
    finally:
        LangChainInstrumentor().uninstrument()


def test_cli_commands_in_the_readme_run(tmp_path, capsys):
    assert cli(["config"]) == 0
    assert "otlp_port = 4318" in capsys.readouterr().out
    out = tmp_path / "calibration.html"
    assert cli(["calibrate", "--begin", str(ROOT / "tests/data/begin/begin_dev_wow_200.tsv"), "--out", str(out)]) == 0
    # The same scorer on the same rows as the committed results file: the same ranking quality.
    expected = json.loads((ROOT / "benchmarks/results/calibration_begin.json").read_text())["roc_auc"]
    assert f"ROC AUC {expected:.3f}" in capsys.readouterr().out and out.exists()
    hashed = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "review", "hash-token"], input="s3cret\n",
                            capture_output=True, text=True, check=True)
    assert hashed.stdout.strip() == hashlib.sha256(b"s3cret").hexdigest()


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name} links to a missing {target}"


def test_image_sizes_in_the_docs_come_from_the_results_file():
    import json

    results = json.loads((ROOT / "benchmarks" / "results" / "image.json").read_text())
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    for variant, line in results.items():
        row = re.search(rf"^\| {variant} \(`make image[^|]*\|[^|]*\| ([\d,]+) MB \| (\d+) min \|$", deploy, re.M)
        assert row, f"docs/deploy.md has no {variant} image row"
        assert int(row.group(1).replace(",", "")) == line["size_mb"] and int(row.group(2)) == round(line["build_s"] / 60)
    # The README quotes the slim image, measured after the report extra split (deploy.md says which row predates it).
    assert f"is {results['slim']['size_mb']:,} MB" in " ".join(README.split()), "README.md does not quote the slim image's size"

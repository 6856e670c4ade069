"""No secret setting is ever shown: `rag-monitor config`, log records and CLI error lines.

The list of secrets is the settings marked ``secret=`` in ``rag_monitor/settings.py``; a setting
whose name says it may hold a credential must be marked or listed here as not secret, so a new
secret cannot be added without being covered.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import subprocess
import sys

from rag_monitor.settings import SECRET, URL_SECRET, AgentSettings, load_settings, secret_settings

NOT_SECRET = {
    "judge_api_key_env": "the name of the variable holding the key, not the key (its value is masked too)",
    "scorer_batch_tokens": "a size",
}
CREDENTIAL_NAME = re.compile(r"token|key|secret|passw|credential|url")
JUDGE_KEY_VAR = "RAG_MONITOR_TEST_JUDGE_KEY"


def secret_values() -> dict[str, str]:
    """An environment setting every secret setting (and the judge's key) to a recognisable value."""
    env = {}
    for name in secret_settings(SECRET):
        env[name] = f"{name.replace('_', '-')}-s3cret-value"
    env["review_tokens"] = "alice:reviewer:" + "ab" * 32
    for name in secret_settings(URL_SECRET):
        env[name] = f"http://user:{name.replace('_', '-')}-pa55@127.0.0.1:1/x"
    env["store_url"] = "postgresql+psycopg://rag:store-url-pa55@127.0.0.1:1/rag"
    return {f"RAG_MONITOR_{k.upper()}": v for k, v in env.items()} | {
        "RAG_MONITOR_JUDGE_API_KEY_ENV": JUDGE_KEY_VAR, JUDGE_KEY_VAR: "judge-api-k3y-value"}


def secrets_in(env: dict[str, str]) -> list[str]:
    found = []
    for var, value in env.items():
        if "://" in value:
            found.append(value.split("://", 1)[1].split("@")[0].split(":", 1)[1])  # the password
        elif var != "RAG_MONITOR_JUDGE_API_KEY_ENV":
            found.append(value)
    return found


def test_every_setting_that_may_hold_a_credential_is_marked():
    marked = secret_settings(SECRET) | secret_settings(URL_SECRET)
    assert {"otlp_token", "review_tokens", "pseudonym_key", "store_url", "phoenix_url"} <= marked
    named = {f.name for f in dataclasses.fields(AgentSettings) if CREDENTIAL_NAME.search(f.name)}
    unmarked = named - marked - set(NOT_SECRET)
    assert not unmarked, f"mark these secret=SECRET or URL_SECRET in settings.py, or list them in NOT_SECRET: {unmarked}"


def test_config_prints_no_secret():
    env = secret_values()
    done = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "config"], capture_output=True, text=True,
                          check=True, env={**os.environ, **env}, timeout=120)
    for secret in secrets_in(env):
        assert secret not in done.stdout
    for name in secret_settings(SECRET):
        assert f"{name} = '***'" in done.stdout
    assert "pseudonym_key = '***'" in done.stdout
    for name in secret_settings(URL_SECRET):
        assert re.search(rf"^{name} = '[^']*:\*\*\*@", done.stdout, re.M), name


def test_cli_errors_and_logs_show_no_secret(tmp_path):
    env = secret_values()
    # An unreachable store: the agent's error line and its verbose log name it without secrets.
    failed = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "-v", "export", "golden", "--out",
                             str(tmp_path / "g.jsonl")], capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=120)
    assert failed.returncode == 2 and "rag-monitor: error:" in failed.stderr
    for secret in secrets_in(env):
        assert secret not in failed.stderr + failed.stdout


def test_log_records_mask_every_secret(caplog, monkeypatch):
    from rag_monitor.masking import install_log_masking, mask

    env = secret_values()
    monkeypatch.setenv(JUDGE_KEY_VAR, env[JUDGE_KEY_VAR])
    load_settings(environ=env)
    install_log_masking()
    caplog.set_level(logging.INFO)
    secrets = secrets_in(env)
    logging.getLogger("rag_monitor.test").info("values: %s", " | ".join(secrets))
    try:
        raise RuntimeError(secrets[0])
    except RuntimeError:
        logging.getLogger("rag_monitor.test").exception("failed")
    for secret in secrets:
        assert secret not in caplog.text and secret not in mask(f"x {secret} y")
    assert "***" in caplog.text


def test_a_database_user_name_is_not_a_secret_but_an_http_token_is():
    """A bare user in a database URL is a name (masking it turned every ``postgresql`` into
    ``***ql`` in the logs); a bare userinfo in an HTTP URL is a token."""
    from rag_monitor.masking import _url_secret, mask_url

    assert _url_secret("postgresql+psycopg://postgres@127.0.0.1:5432/rag") is None
    assert mask_url("postgresql+psycopg://postgres@127.0.0.1:5432/rag") == "postgresql+psycopg://postgres@127.0.0.1:5432/rag"
    assert _url_secret("postgresql+psycopg://rag:pw-secret@db/rag") == "pw-secret"
    assert _url_secret("https://s3cr3t-token@phoenix.example") == "s3cr3t-token"
    assert mask_url("https://s3cr3t-token@phoenix.example/v1") == "https://***@phoenix.example/v1"

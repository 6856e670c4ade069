"""Secrets never reach output: `rag-monitor config`, logs and error messages mask them.

Secret settings (tokens, credentials inside URLs) are registered when settings load; from
then on every log record's message and traceback, and every CLI error line, has them
replaced by ``***``. A URL keeps its scheme, user, host and path; only the password goes.

Usage::

    display_setting("store_url", "postgresql+psycopg://rag:pw@db/rag")   # 'postgresql+psycopg://rag:***@db/rag'
    register_secrets(settings); install_log_masking()
    mask("connect to ...pw...")                                          # 'connect to ...***...'
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rag_monitor.settings import SECRET, URL_SECRET, secret_settings

MASK = "***"
SECRET_SETTINGS = secret_settings(SECRET)
"""Settings whose whole value is secret, marked ``secret=SECRET`` in ``settings.py`` (review_tokens
holds digests, but a token pasted by mistake in place of its digest must not be printed either)."""
URL_SETTINGS = secret_settings(URL_SECRET)

_secrets: set[str] = set()
_lock = threading.Lock()


def _bare_userinfo_is_token(scheme: str) -> bool:
    """``https://TOKEN@host`` carries a token; ``postgresql://postgres@host`` a user name (which,
    masked in every log line, would also turn ``postgresql`` into ``***ql``)."""
    return scheme.lower() in ("http", "https")


def mask_url(url: str) -> str:
    """``url`` with the password (and a bare token in an HTTP userinfo) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    if "@" not in parts.netloc:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    if ":" in userinfo:
        return urlunsplit(parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"))
    return urlunsplit(parts._replace(netloc=f"{MASK}@{host}")) if _bare_userinfo_is_token(parts.scheme) else url


def _url_secret(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if "@" not in parts.netloc:
        return None
    userinfo = parts.netloc.rsplit("@", 1)[0]
    if ":" in userinfo:
        return userinfo.split(":", 1)[1]
    return userinfo if _bare_userinfo_is_token(parts.scheme) else None


def display_setting(name: str, value: Any) -> str:
    """The ``repr`` of a setting's value as `rag-monitor config` prints it."""
    if name in SECRET_SETTINGS and value:
        return repr(MASK)
    if name in URL_SETTINGS and isinstance(value, str):
        return repr(mask_url(value))
    return repr(value)


def register_secrets(settings: Any) -> None:
    """Remember the secret values of ``settings`` so that ``mask`` hides them."""
    found = [str(getattr(settings, name, "") or "") for name in SECRET_SETTINGS]
    found += [_url_secret(str(getattr(settings, name, "") or "")) or "" for name in URL_SETTINGS]
    key_env = str(getattr(settings, "judge_api_key_env", "") or "")
    if key_env:  # the judge's API key is never a setting, but it is a secret all the same
        found.append(os.environ.get(key_env, ""))
    with _lock:
        # Very short values would mask unrelated text; a 1-3 character secret is no secret.
        _secrets.update(s for s in found if len(s) >= 4)


def mask(text: str) -> str:
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


_installed = False


def install_log_masking() -> None:
    """Mask registered secrets in every log record created from now on, by any logger."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    make_record = logging.getLogRecordFactory()

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        if not _secrets:
            return record
        try:
            record.msg, record.args = mask(record.getMessage()), ()
            if record.exc_info and not record.exc_text:
                record.exc_text = mask(logging.Formatter().formatException(record.exc_info))
        except Exception:  # noqa: BLE001 - a bad format string is logging's to report, not ours
            pass
        return record

    logging.setLogRecordFactory(masked_record)

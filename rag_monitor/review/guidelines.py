"""Operator-written review guidelines (Markdown), shown beside the item.

Rendered with markdown-it-py in CommonMark mode with raw HTML off: tags in the file are
escaped, ``javascript:`` and other unsafe link schemes are refused by markdown-it's link
validation, and bidirectional control characters are made visible first.
"""

from __future__ import annotations

from pathlib import Path

from markupsafe import Markup

from rag_monitor.review.blind import neutralise

DEFAULT_GUIDELINES = """\
**Step 1, relevance.** Mark every document that helps answer the question (`1`-`9` toggles
relevant, `Shift`+digit marks it *gold*: needed for a complete answer). You do not see the
answer yet, nor which documents it was given.

**Step 2, the answer.** *Faithful*: every claim is supported by the contexts shown.
*Correct*: a user would accept it. If it refused, say whether refusing was right. Write the
answer it should have given when it is wrong or incomplete.

Skip (`s`) an item you cannot judge, with a reason.
"""


def render_markdown(text: str) -> Markup:
    from markdown_it import MarkdownIt

    return Markup(MarkdownIt("commonmark", {"html": False}).render(neutralise(text)))


def load_guidelines(path: str) -> Markup:
    """The guidelines file rendered to safe HTML; the built-in text when no path is set."""
    if not path:
        return render_markdown(DEFAULT_GUIDELINES)
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"review_guidelines: no file {path!r}")
    return render_markdown(file.read_text(encoding="utf-8"))

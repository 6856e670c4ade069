"""Merge point of the probes and signals revisions, under the id stores already carry.

The signals revision first landed as ``0006_signals`` (after ``0005_runtime``, creating
``index_documents``; 11 main commits, 2026-11-30) and was then renamed ``0007_signals`` with
``0006_probes`` chained before it. Both ids are in stores, so both stay: ``0006_signals`` is
restored unchanged, and this revision merges it with ``0006_probes``. Every store reaches the same
head: at ``0006_probes`` it gains ``index_documents`` (``0006_signals``), at ``0006_signals`` the
probe tables (``0006_probes``), and a store already stamped ``0007_signals`` (the renamed,
linear revision: probe tables and ``index_documents``) is at head. Nothing to do here.

Revision ID: 0007_signals
Revises: 0006_signals, 0006_probes
Create Date: 2026-11-30
"""

from __future__ import annotations

revision = "0007_signals"
down_revision = ("0006_signals", "0006_probes")  # main line first: `store downgrade` steps back to it
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

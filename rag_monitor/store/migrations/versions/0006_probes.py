"""Nearest-neighbour stability probes: pinned baselines, probe runs, announced index changes.

Revision ID: 0006_probes
Revises: 0005_runtime
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_probes"
down_revision = "0005_runtime"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "probe_baselines",
        sa.Column("probe_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("k", sa.Integer, nullable=False),
        sa.Column("baseline_ids", sa.Text, nullable=False),
        sa.Column("pinned_at", sa.Double, nullable=False),
        sa.Column("pinned_by", sa.String(200), nullable=False),
        sa.Column("latest_ids", sa.Text, nullable=True),
        sa.Column("run_id", sa.Integer, nullable=True),
        sa.Column("jaccard", sa.Double, nullable=True),
        sa.Column("rbo", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("probe_id", name="pk_probe_baselines"),
    )
    op.create_index("ix_probe_baselines_run_id", "probe_baselines", ["run_id"])
    op.create_table(
        "probe_runs",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double, nullable=True),
        sa.Column("probes", sa.Integer, nullable=False, server_default="0"),
        sa.Column("compared", sa.Integer, nullable=False, server_default="0"),
        sa.Column("errors", sa.Integer, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_probe_runs"),
    )
    op.create_index("ix_probe_runs_finished_at", "probe_runs", ["finished_at"])
    op.create_table(
        "index_changes",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("announced_at", sa.Double, nullable=False),
        sa.Column("until", sa.Double, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_index_changes"),
    )
    op.create_index("ix_index_changes_until", "index_changes", ["until"])


def downgrade() -> None:
    op.drop_index("ix_index_changes_until", table_name="index_changes")
    op.drop_table("index_changes")
    op.drop_index("ix_probe_runs_finished_at", table_name="probe_runs")
    op.drop_table("probe_runs")
    op.drop_index("ix_probe_baselines_run_id", table_name="probe_baselines")
    op.drop_table("probe_baselines")

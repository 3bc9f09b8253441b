"""Verdicts of the tuner's final comparisons (tuned pick vs runner-up vs default).

Revision ID: 0002
Revises: 0001
Create Date: 2025-06-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "verdicts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workload_id", sa.Integer(), sa.ForeignKey("workloads.id", name="fk_verdicts_workload"),
                  nullable=False),
        sa.Column("target_id", sa.Integer(), sa.ForeignKey("targets.id", name="fk_verdicts_target"),
                  nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("best_config", sa.Text(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("contenders", sa.Text(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("akg_version", sa.String(64), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("workload_id", "target_id", "measured_at", name="uq_verdicts_workload_target_time"),
    )


def downgrade() -> None:
    op.drop_table("verdicts")

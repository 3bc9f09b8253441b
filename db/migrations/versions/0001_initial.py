"""Initial schema: workloads, targets, records.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.UniqueConstraint("key", name="uq_workloads_key"),
    )
    op.create_table(
        "targets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.UniqueConstraint("key", name="uq_targets_key"),
    )
    op.create_table(
        "records",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workload_id", sa.Integer(), sa.ForeignKey("workloads.id", name="fk_records_workload"),
                  nullable=False),
        sa.Column("target_id", sa.Integer(), sa.ForeignKey("targets.id", name="fk_records_target"),
                  nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("akg_version", sa.String(64), nullable=False),
        sa.Column("tvm_version", sa.String(64), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("workload_id", "target_id", "config_hash", name="uq_records_workload_target_config"),
    )
    op.create_index("ix_records_rank", "records", ["workload_id", "target_id", "status", "cost"])
    op.create_index("ix_records_target", "records", ["target_id", "measured_at"])


def downgrade() -> None:
    op.drop_index("ix_records_target", table_name="records")
    op.drop_index("ix_records_rank", table_name="records")
    op.drop_table("records")
    op.drop_table("targets")
    op.drop_table("workloads")

"""Leases (tuners sharing one database split a workload's configs) and the model registry
(which kernels, how many times each, make up a tuned model on a target).

Revision ID: 0003
Revises: 0002
Create Date: 2025-07-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workload_id", sa.Integer(), sa.ForeignKey("workloads.id", name="fk_leases_workload"),
                  nullable=False),
        sa.Column("target_id", sa.Integer(), sa.ForeignKey("targets.id", name="fk_leases_target"),
                  nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("workload_id", "target_id", "config_hash", name="uq_leases_workload_target_config"),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("target_id", sa.Integer(), sa.ForeignKey("targets.id", name="fk_models_target"),
                  nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("name", "target_id", name="uq_models_name_target"),
    )
    op.create_table(
        "model_kernels",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("model_id", sa.Integer(), sa.ForeignKey("models.id", name="fk_model_kernels_model"),
                  nullable=False),
        sa.Column("workload_id", sa.Integer(), sa.ForeignKey("workloads.id", name="fk_model_kernels_workload"),
                  nullable=False),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.UniqueConstraint("model_id", "workload_id", name="uq_model_kernels_model_workload"),
    )


def downgrade() -> None:
    op.drop_table("model_kernels")
    op.drop_table("models")
    op.drop_table("leases")

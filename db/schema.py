"""The tables of the tuning database (SQLAlchemy 2 declarative, typed). Migrations in
`akg/db/migrations/versions/` create exactly this; a test compares the two."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Length limits keep the unique indexes portable (MySQL cannot index unbounded text).
KEY_LENGTH = 255
NAME_LENGTH = 255


class Base(DeclarativeBase):
    pass


class WorkloadRow(Base):
    """A workload: canonical key (`Subgraph.workload_key`), display name, JSON description."""

    __tablename__ = "workloads"
    __table_args__ = (UniqueConstraint("key", name="uq_workloads_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), default="")
    description: Mapped[str] = mapped_column(Text, default="{}")


class TargetRow(Base):
    """A target: `Target.key` (what changes generated code) and a JSON description."""

    __tablename__ = "targets"
    __table_args__ = (UniqueConstraint("key", name="uq_targets_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    description: Mapped[str] = mapped_column(Text, default="{}")


class RecordRow(Base):
    """One measurement. `config_hash` (sha256 of the canonical config JSON) carries the
    uniqueness of (workload, target, config), since long text cannot be indexed everywhere.
    `id` grows in arrival order and breaks timestamp ties."""

    __tablename__ = "records"
    __table_args__ = (
        UniqueConstraint("workload_id", "target_id", "config_hash", name="uq_records_workload_target_config"),
        Index("ix_records_rank", "workload_id", "target_id", "status", "cost"),
        Index("ix_records_target", "target_id", "measured_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", name="fk_records_workload"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", name="fk_records_target"))
    config: Mapped[str] = mapped_column(Text)
    config_hash: Mapped[str] = mapped_column(String(64))
    cost: Mapped[float | None] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str] = mapped_column(Text, default="")
    host: Mapped[str] = mapped_column(String(NAME_LENGTH), default="")
    akg_version: Mapped[str] = mapped_column(String(64), default="")
    tvm_version: Mapped[str] = mapped_column(String(64), default="")
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class VerdictRow(Base):
    """The verdict of a final comparison (`akg.db.record.Verdict`): the winner's config, its
    role, the tuning pick that was judged and every contender as JSON. Only ever added; the
    latest per (workload, target) counts. (workload, target, measured_at) is unique, so that
    importing an export twice adds nothing."""

    __tablename__ = "verdicts"
    __table_args__ = (
        UniqueConstraint("workload_id", "target_id", "measured_at", name="uq_verdicts_workload_target_time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", name="fk_verdicts_workload"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", name="fk_verdicts_target"))
    config: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(String(16))
    best_config: Mapped[str] = mapped_column(Text)
    cost: Mapped[float | None] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(16))
    contenders: Mapped[str] = mapped_column(Text, default="[]")
    host: Mapped[str] = mapped_column(String(NAME_LENGTH), default="")
    akg_version: Mapped[str] = mapped_column(String(64), default="")
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LeaseRow(Base):
    """A tuner's claim on one config of a workload on a target while it measures it
    (`Database.claim`): `owner` names the tuner (host:pid:random); after `expires_at`
    another tuner may take the config over. Unique per (workload, target, config)."""

    __tablename__ = "leases"
    __table_args__ = (
        UniqueConstraint("workload_id", "target_id", "config_hash", name="uq_leases_workload_target_config"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", name="fk_leases_workload"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", name="fk_leases_target"))
    config_hash: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(NAME_LENGTH))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ModelRow(Base):
    """A tuned model on a target (`Database.register_model`): its name and when its kernel
    list was last written. Unique per (name, target)."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("name", "target_id", name="uq_models_name_target"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", name="fk_models_target"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ModelKernelRow(Base):
    """One kernel (workload) of a model and how many times the model runs it; `id` keeps
    the model's order of kernels."""

    __tablename__ = "model_kernels"
    __table_args__ = (UniqueConstraint("model_id", "workload_id", name="uq_model_kernels_model_workload"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", name="fk_model_kernels_model"))
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", name="fk_model_kernels_workload"))
    occurrences: Mapped[int] = mapped_column(Integer)


workloads = WorkloadRow.__table__
targets = TargetRow.__table__
records = RecordRow.__table__
verdicts = VerdictRow.__table__
leases = LeaseRow.__table__
models = ModelRow.__table__
model_kernels = ModelKernelRow.__table__

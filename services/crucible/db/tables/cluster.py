"""What a backend last reported about its machines: nodes with their GPUs, and the pods
(or local process groups) of runs. Replaced as a whole on every report, so it is always one
consistent picture, never a mix of two reports."""

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import Base
from crucible.db.types import BigId, UtcDateTime


class ClusterNode(Base):
    __tablename__ = "cluster_nodes"

    cluster: Mapped[str] = mapped_column(String(63), primary_key=True)
    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    ready: Mapped[bool] = mapped_column(Boolean)
    schedulable: Mapped[bool] = mapped_column(Boolean)
    gpus_allocatable: Mapped[int] = mapped_column(Integer)
    gpus_allocated: Mapped[int] = mapped_column(Integer)
    gpu_product: Mapped[str] = mapped_column(String(100), default="")
    reported_at: Mapped[datetime] = mapped_column(UtcDateTime)


class RunPod(Base):
    """One pod (Kubernetes) or process group (local) of a run's attempt."""

    __tablename__ = "run_pods"
    __table_args__ = (Index("ix_run_pods_cluster", "cluster"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(63))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(253))
    namespace: Mapped[str] = mapped_column(String(63), default="")
    phase: Mapped[str] = mapped_column(String(32))
    node: Mapped[str | None] = mapped_column(String(253))
    gpus: Mapped[int] = mapped_column(Integer)
    # Which devices, where the backend knows (the local executor's CUDA_VISIBLE_DEVICES).
    gpu_devices: Mapped[str] = mapped_column(String(200), default="")
    pid: Mapped[int | None] = mapped_column(BigInteger)
    reported_at: Mapped[datetime] = mapped_column(UtcDateTime)

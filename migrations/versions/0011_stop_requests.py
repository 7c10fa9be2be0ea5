"""Stop requests and the workers' slots.

`cronjob_stop`: an operator's request to stop a running run `(job_id, attempt)`; the
worker holding the run reads it within a second and ends the job. `cronjob_worker.slots`
and `job_slots`: the worker's slots and which slot runs which job (`"id:slot,..."`), for
the Workers page's busy view.

Revision ID: 0011
Revises: 0008
Create Date: 2027-01-20
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "cronjob_stop",
        sa.Column("job_id", Id, sa.ForeignKey("cronjob_queue.id", ondelete="CASCADE",
                                              name="fk_cronjob_stop_job"), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("requested_by", sa.String(64), nullable=False),
        sa.Column("requested_at", UtcDateTime, nullable=False),
        mysql_engine="InnoDB", mysql_charset="utf8mb4", mysql_collate="utf8mb4_bin",
    )
    # Nullable columns at the end: no table copy on MariaDB (instant) or PostgreSQL.
    op.add_column("cronjob_worker", sa.Column("slots", sa.Integer, nullable=True))
    op.add_column("cronjob_worker", sa.Column("job_slots", sa.String(1000), nullable=True))


def downgrade() -> None:
    for column in ("job_slots", "slots"):
        if op.get_bind().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE cronjob_worker DROP COLUMN {column}")  # SQLite >= 3.35
        else:
            op.drop_column("cronjob_worker", column)
    op.drop_table("cronjob_stop")

"""Families, dependencies and readable failures.

`cronjob_family`: one row per completion of a family (a root row and every row under it):
its generation (1, then 2 after failed rows were retried and finished again ...), when it
completed, how (`success`, `failure`, `cancelled`) and its counts per status (JSON). The
row is written in the transaction that finishes the family's last row, together with the
callback rows it starts.

`cronjob_dependency`: a row (`job_id`) waits until `depends_on_id` has finished (a root:
its whole family).

`cronjob_queue.traceback`: the last part of a handler's traceback; `fingerprint`: the
failure's group (exception type and normalised text, hashed).

Revision ID: 0013
Revises: 0012
Create Date: 2027-02-10
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "cronjob_family",
        sa.Column("root_id", Id, primary_key=True, autoincrement=False),
        sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("counts", sa.Text, nullable=False),
        sa.Column("completed_at", UtcDateTime, nullable=False),
        mysql_engine="InnoDB", mysql_charset="utf8mb4", mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_cronjob_family_completed", "cronjob_family", ["completed_at"])
    op.create_table(
        "cronjob_dependency",
        sa.Column("job_id", Id, sa.ForeignKey("cronjob_queue.id", ondelete="CASCADE",
                                              name="fk_cronjob_dependency_job"),
                  primary_key=True),
        sa.Column("depends_on_id", Id, primary_key=True, autoincrement=False),
        mysql_engine="InnoDB", mysql_charset="utf8mb4", mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_cronjob_dependency_on", "cronjob_dependency", ["depends_on_id"])
    # Nullable columns at the end: no table copy on MariaDB (instant) or PostgreSQL.
    op.add_column("cronjob_queue", sa.Column("traceback", sa.Text, nullable=True))
    op.add_column("cronjob_queue", sa.Column("fingerprint", sa.String(40), nullable=True))


def downgrade() -> None:
    for column in ("fingerprint", "traceback"):
        if op.get_bind().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE cronjob_queue DROP COLUMN {column}")  # SQLite >= 3.35
        else:
            op.drop_column("cronjob_queue", column)
    op.drop_index("ix_cronjob_dependency_on", table_name="cronjob_dependency")
    op.drop_table("cronjob_dependency")
    op.drop_index("ix_cronjob_family_completed", table_name="cronjob_family")
    op.drop_table("cronjob_family")

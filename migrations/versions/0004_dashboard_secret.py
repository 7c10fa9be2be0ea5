"""Dashboard: a table of secrets shared by every process of one database (the generated
dashboard token, so that two dashboards accept each other's session cookies).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-10
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "cronjob_secret",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(255), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        **MYSQL,
    )


def downgrade() -> None:
    op.drop_table("cronjob_secret")

"""API tokens with scopes: `cronjob_token`.

One row per token made by `cronjobs tokens create NAME --scope SCOPE`: its unique name,
its scope (`read`, `dispatch`, `operate` or `admin`), the SHA-256 of the token (the token
itself is shown once and never stored), when it was made, last used (at most once a
minute) and revoked (NULL: valid).

Revision ID: 0018
Revises: 0017
Create Date: 2027-03-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "cronjob_token",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("last_used_at", UtcDateTime, nullable=True),
        sa.Column("revoked_at", UtcDateTime, nullable=True),
        mysql_engine="InnoDB", mysql_charset="utf8mb4", mysql_collate="utf8mb4_bin",
    )


def downgrade() -> None:
    op.drop_table("cronjob_token")

"""Alembic, driven from Python: `upgrade(engine)`, `downgrade(engine)`, `current(engine)`."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine


def migrations_path() -> Path:
    """The Alembic environment: inside the wheel (`cronjobs/_migrations`) or the repo's
    `migrations/` in a source checkout."""
    packaged = Path(__file__).parent / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def _config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_path()))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to `revision` (default the newest)."""
    command.upgrade(_config(engine), revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Revert migrations down to `revision` (default: drop everything)."""
    command.downgrade(_config(engine), revision)


def current(engine: Engine) -> str | None:
    """The revision the database is at, or None when never migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()

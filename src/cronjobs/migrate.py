"""Alembic, driven from Python: `upgrade(engine)`, `downgrade(engine)`, `current(engine)`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
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


def upgrade(engine: Engine, revision: str = "head", *,
            on_revision: Callable[[str], None] | None = None) -> None:
    """Apply migrations up to `revision` (default the newest), in one transaction.

    Args:
        on_revision: called with each revision id (`"0003"`) once it is applied, in order
            (`cronjobs migrate` counts them on its progress bar).
    """
    cfg = _config(engine)
    if on_revision is not None:
        def applied(*, step, **_) -> None:  # Alembic's on_version_apply hook
            if step.up_revision_id is not None:
                on_revision(step.up_revision_id)

        cfg.attributes["on_version_apply"] = (applied,)
    command.upgrade(cfg, revision)


def pending(engine: Engine, revision: str = "head") -> list[str]:
    """The revision ids `upgrade(engine, revision)` would apply, oldest first."""
    script = ScriptDirectory.from_config(_config(engine))
    steps = script.iterate_revisions(revision, current(engine) or "base")
    return [step.revision for step in reversed(list(steps))]


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Revert migrations down to `revision` (default: drop everything)."""
    command.downgrade(_config(engine), revision)


def current(engine: Engine) -> str | None:
    """The revision the database is at, or None when never migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()

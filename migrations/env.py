"""Alembic environment for cronjobs: runs against the engine handed in by cronjobs.migrate
(or `sqlalchemy.url` from an alembic.ini when run with the alembic command)."""

from alembic import context
from sqlalchemy import create_engine

from cronjobs.store.models import metadata

config = context.config
engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url"))

with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata,
                      render_as_batch=connection.dialect.name == "sqlite",
                      on_version_apply=config.attributes.get("on_version_apply", ()))
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()

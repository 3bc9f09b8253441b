"""Alembic environment of the tuning database. `akg.db.migrate` runs it on an open connection
(in a transaction it holds); `alembic` run by hand gets its URL from `sqlalchemy.url`."""

from alembic import context
from sqlalchemy import create_engine

from akg.db.schema import Base

config = context.config


def run_migrations(connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=Base.metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif connection is not None:
    run_migrations(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as connection:
        run_migrations(connection)
    engine.dispose()

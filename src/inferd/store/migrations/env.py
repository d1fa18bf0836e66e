"""Alembic environment: always run with a connection handed in by `store.db.migrate`."""

from alembic import context

from inferd.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

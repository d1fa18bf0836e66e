"""How far each usage journal of a SQLite database is folded into `usage_rows` (issue 15).

A SQLite deployment makes a call's usage row durable by appending it to a journal file of its
process (store/usage_journal.py), then folds rows into the usage tables in batches. `folded` is
the journal's length in bytes already written to the tables, updated in the same transaction, so
every row is folded exactly once whoever folds it. PostgreSQL deployments leave it empty.

Revision ID: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.create_table(
        "usage_journal",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("folded", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_journal")

"""The usage row's `guardrail`: the name of the output guardrail that withheld a reply (the engine
was reached, so the call is billed); NULL for every other call. An input guardrail that blocks
stops the call before any engine, and writes no row at all.

Revision ID: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    op.add_column("usage_rows", sa.Column("guardrail", sa.String(64), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35+, PostgreSQL), as 0014 does: no batch rebuild of a
    # table that may hold millions of rows.
    op.execute("ALTER TABLE usage_rows DROP COLUMN guardrail")

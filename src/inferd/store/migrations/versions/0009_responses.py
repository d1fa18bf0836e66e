"""Stored responses of the Responses API: kept 30 days for the key that
made them, read back by id (GET, DELETE, `previous_response_id`) and purged once expired.

`input_items` holds the whole conversation the response answered (earlier turns' items first), so
a continuation reads one row, however long the chain; `response` is the response object as sent.
Both are JSON text. `created_at` is indexed for the retention job, which deletes what is older than
30 days.

Revision ID: 0009
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import created_at, key_id

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), primary_key=True),
        key_id(nullable=False),
        created_at(),
        sa.Column("input_items", sa.Text, nullable=False),
        sa.Column("response", sa.Text, nullable=False),
    )
    op.create_index("ix_responses_created_at", "responses", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_responses_created_at", table_name="responses")
    op.drop_table("responses")

"""The response cache (issue 32): its entries, and what a hit leaves in the books.

`cache_entries` holds one stored answer per cache key (the SHA-256 of the scope, the capability,
the canonical model id and every field that can change the output): `reply` is the answer as JSON
(a chat completion, an embedding or rerank result), enough to replay it blocking or streamed in
every dialect; the tokens and cost are those first billed. `org` is the tenant whose entries
`DELETE /v1/admin/cache` empties; `created_at` gives the age and the order in which entries leave
once `max_entries` is reached. Deployments with Redis keep their entries there instead.

A usage row of a hit has `cache_hit` true, cost 0 and `saved_usd` the cost first billed; the
rollup adds them up as `cache_hits` and `saved_usd` for the summaries.

Revision ID: 0015
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import created_at

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    op.create_table(
        "cache_entries",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("org", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("reply", sa.Text, nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("cached_prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        created_at(),
    )
    op.create_index("ix_cache_entries_created", "cache_entries", ["created_at"])
    op.create_index("ix_cache_entries_org", "cache_entries", ["org"])
    op.add_column("usage_rows", sa.Column("cache_hit", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("usage_rows", sa.Column("saved_usd", sa.Float, nullable=False, server_default="0"))
    op.add_column("usage_rollup", sa.Column("cache_hits", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("usage_rollup", sa.Column("saved_usd", sa.Float, nullable=False, server_default="0"))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35+, PostgreSQL), as 0014 does, rather than a batch rebuild.
    for table, column in (("usage_rollup", "saved_usd"), ("usage_rollup", "cache_hits"),
                          ("usage_rows", "saved_usd"), ("usage_rows", "cache_hit")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    op.drop_index("ix_cache_entries_org", table_name="cache_entries")
    op.drop_index("ix_cache_entries_created", table_name="cache_entries")
    op.drop_table("cache_entries")

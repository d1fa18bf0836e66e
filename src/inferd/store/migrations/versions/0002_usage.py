"""Usage reporting: indexes for /v1/usage pages, the per-day rollup for /v1/usage/summary.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_usage_rows_key_model_created", "usage_rows", ["key_id", "model", "created_at"])
    op.create_index("ix_usage_rows_key_workspace_created", "usage_rows", ["key_id", "workspace", "created_at"])
    op.create_table(
        "usage_daily",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("dims", sa.String(16), primary_key=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("workspace", sa.String(32), nullable=False),
        sa.Column("deployment", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=True),
        sa.Column("metadata", sa.Text, nullable=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("cached_prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )
    # Rows written before this migration: fold them into the rollup once.
    if op.get_bind().dialect.name == "sqlite":
        _backfill_sqlite()
        return
    day = "to_char(created_at, 'YYYY-MM-DD')"
    # The same hash as store.usage.dims_hash, so later writes land on these rows.
    dims = ("substr(md5(concat_ws(chr(31), model, workspace, deployment, coalesce(user_id, chr(1)), "
            "coalesce(metadata, chr(1)))), 1, 16)")
    op.execute(f"""
        INSERT INTO usage_daily (key_id, day, dims, model, workspace, deployment, user_id, metadata, requests,
                                 prompt_tokens, cached_prompt_tokens, completion_tokens, cost_usd)
        SELECT key_id, {day}, {dims}, model, workspace, deployment, user_id, metadata, count(*),
               sum(prompt_tokens), sum(cached_prompt_tokens), sum(completion_tokens), sum(cost_usd)
        FROM usage_rows GROUP BY key_id, {day}, model, workspace, deployment, user_id, metadata""")


def _backfill_sqlite() -> None:
    """SQLite has no md5: hash the groups in Python with the writer's own function."""
    from inferd.store.usage import dims_hash

    bind = op.get_bind()
    groups = bind.execute(sa.text("""
        SELECT key_id, substr(created_at, 1, 10), model, workspace, deployment, user_id, metadata, count(*),
               sum(prompt_tokens), sum(cached_prompt_tokens), sum(completion_tokens), sum(cost_usd)
        FROM usage_rows GROUP BY 1, 2, 3, 4, 5, 6, 7""")).all()
    if not groups:
        return
    bind.execute(sa.text("""
        INSERT INTO usage_daily (key_id, day, dims, model, workspace, deployment, user_id, metadata, requests,
                                 prompt_tokens, cached_prompt_tokens, completion_tokens, cost_usd)
        VALUES (:key_id, :day, :dims, :model, :workspace, :deployment, :user_id, :metadata, :requests,
                :prompt_tokens, :cached_prompt_tokens, :completion_tokens, :cost_usd)"""),
        [{"key_id": g[0], "day": g[1], "dims": dims_hash(g[2], g[3], g[4], g[5], g[6]), "model": g[2],
          "workspace": g[3], "deployment": g[4], "user_id": g[5], "metadata": g[6], "requests": g[7],
          "prompt_tokens": g[8], "cached_prompt_tokens": g[9], "completion_tokens": g[10], "cost_usd": g[11]}
         for g in groups])


def downgrade() -> None:
    op.drop_table("usage_daily")
    op.drop_index("ix_usage_rows_key_workspace_created", "usage_rows")
    op.drop_index("ix_usage_rows_key_model_created", "usage_rows")

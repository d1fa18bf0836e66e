"""Usage reporting: page indexes for /v1/usage, the hourly, daily and monthly rollup for /v1/usage/summary.

Revision ID: 0002
"""

from datetime import datetime

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import key_id, metadata_json, token_counts, usage_dimension

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    # Pages are read newest first with id breaking ties: PostgreSQL needs id in the index to skip a sort.
    op.drop_index("ix_usage_rows_key_created", "usage_rows")
    op.create_index("ix_usage_rows_key_created", "usage_rows", ["key_id", "created_at", "id"])
    op.create_index("ix_usage_rows_key_model_created", "usage_rows", ["key_id", "model", "created_at", "id"])
    op.create_index("ix_usage_rows_key_workspace_created", "usage_rows",
                    ["key_id", "workspace", "created_at", "id"])
    op.create_table(
        "usage_rollup",
        key_id(primary_key=True),
        sa.Column("span", sa.String(5), primary_key=True),
        sa.Column("period", sa.String(13), primary_key=True),
        sa.Column("dims", sa.String(16), primary_key=True),
        usage_dimension("model"),
        usage_dimension("workspace"),
        usage_dimension("deployment"),
        metadata_json(),
        sa.Column("requests", sa.BigInteger, nullable=False),
        *token_counts(sa.BigInteger),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )
    _backfill()


def _backfill() -> None:
    """Fold rows written before this migration into the rollup, with the writer's own function."""
    from inferd.store.usage import ROLLUP_COLUMNS, rollup_deltas

    bind = op.get_bind()
    rows = [dict(r) for r in bind.execute(sa.text(
        "SELECT key_id, created_at, model, workspace, deployment, metadata, prompt_tokens, cached_prompt_tokens, "
        "completion_tokens, cost_usd FROM usage_rows")).mappings()]
    for row in rows:
        if isinstance(row["created_at"], str):  # SQLite hands back the stored text
            row["created_at"] = datetime.fromisoformat(row["created_at"])
    deltas = rollup_deltas(rows)
    if deltas:
        bind.execute(sa.text(f"INSERT INTO usage_rollup ({', '.join(ROLLUP_COLUMNS)}) "
                             f"VALUES ({', '.join(':' + c for c in ROLLUP_COLUMNS)})"), deltas)


def downgrade() -> None:
    op.drop_table("usage_rollup")
    op.drop_index("ix_usage_rows_key_workspace_created", "usage_rows")
    op.drop_index("ix_usage_rows_key_model_created", "usage_rows")
    op.drop_index("ix_usage_rows_key_created", "usage_rows")
    op.create_index("ix_usage_rows_key_created", "usage_rows", ["key_id", "created_at"])

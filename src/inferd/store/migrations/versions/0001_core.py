"""Core tables: orgs, users, keys, usage rows, monthly spend.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import (BIG_ID, created_at, key_id, metadata_json, moment, org_id, reference,
                                             serial_id, token_counts, usage_dimension, user_id)

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "orgs",
        serial_id(),
        sa.Column("slug", sa.String(128), nullable=False, unique=True),
        sa.Column("allowed_models", sa.Text, nullable=False),
        sa.Column("file_attachments", sa.Boolean, nullable=False),
        sa.Column("web_search", sa.Boolean, nullable=False),
        created_at(),
    )
    op.create_table(
        "users",
        serial_id(),
        org_id(),
        sa.Column("subject", sa.String(256), nullable=True),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("given_name", sa.String(256), nullable=True),
        sa.Column("family_name", sa.String(256), nullable=True),
        created_at(),
        sa.UniqueConstraint("org_id", "subject", name="uq_users_org_subject"),
        sa.UniqueConstraint("org_id", "email", name="uq_users_org_email"),
    )
    op.create_table(
        "api_keys",
        serial_id(),
        sa.Column("access_key_id", sa.String(32), nullable=False, unique=True),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        org_id(),
        user_id(nullable=True),
        reference("parent_key_id", "api_keys", nullable=True),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("budget_usd", sa.Float, nullable=True),
        sa.Column("rpm", sa.Integer, nullable=True),
        moment("revoked_at"),
        moment("expires_at"),
        created_at(),
    )
    op.create_table(
        "usage_rows",
        serial_id(BIG_ID),
        sa.Column("org", sa.String(128), nullable=False),
        usage_dimension("deployment"),
        key_id(nullable=False),
        sa.Column("user_id", sa.String(64), nullable=True),
        sa.Column("team_id", sa.Integer, nullable=True),
        usage_dimension("model"),
        usage_dimension("workspace"),
        *token_counts(sa.Integer),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        created_at(),
        metadata_json(),
    )
    op.create_index("ix_usage_rows_key_created", "usage_rows", ["key_id", "created_at"])
    op.create_table(
        "key_spend",
        key_id(primary_key=True),
        sa.Column("month", sa.String(7), primary_key=True),
        sa.Column("spend_usd", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("key_spend", "usage_rows", "api_keys", "users", "orgs"):
        op.drop_table(table)

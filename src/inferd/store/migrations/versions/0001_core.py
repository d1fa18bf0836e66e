"""Core tables: orgs, users, keys, usage rows, monthly spend.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "orgs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("slug", sa.String(128), nullable=False, unique=True),
        sa.Column("allowed_models", sa.Text, nullable=False),
        sa.Column("file_attachments", sa.Boolean, nullable=False),
        sa.Column("web_search", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("org_id", sa.Integer, sa.ForeignKey("orgs.id"), nullable=False),
        sa.Column("subject", sa.String(256), nullable=True),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("given_name", sa.String(256), nullable=True),
        sa.Column("family_name", sa.String(256), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("org_id", "subject", name="uq_users_org_subject"),
        sa.UniqueConstraint("org_id", "email", name="uq_users_org_email"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("access_key_id", sa.String(32), nullable=False, unique=True),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("org_id", sa.Integer, sa.ForeignKey("orgs.id"), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=True),
        sa.Column("parent_key_id", sa.Integer, sa.ForeignKey("api_keys.id"), nullable=True),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("budget_usd", sa.Float, nullable=True),
        sa.Column("rpm", sa.Integer, nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "usage_rows",
        sa.Column("id", big_id, primary_key=True, autoincrement=True),
        sa.Column("org", sa.String(128), nullable=False),
        sa.Column("deployment", sa.String(256), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=True),
        sa.Column("team_id", sa.Integer, nullable=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("workspace", sa.String(32), nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("cached_prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("metadata", sa.Text, nullable=True),
    )
    op.create_index("ix_usage_rows_key_created", "usage_rows", ["key_id", "created_at"])
    op.create_table(
        "key_spend",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("month", sa.String(7), primary_key=True),
        sa.Column("spend_usd", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("key_spend", "usage_rows", "api_keys", "users", "orgs"):
        op.drop_table(table)

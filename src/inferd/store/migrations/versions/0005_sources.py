"""Sources attached to conversations, their conversation links, and embedded text chunks.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "sources",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("org_id", sa.Integer, sa.ForeignKey("orgs.id"), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("source_type", sa.String(32), nullable=False),
        sa.Column("source_name", sa.String(512), nullable=False),
        sa.Column("source_config", sa.Text, nullable=False),
        sa.Column("handler", sa.String(64), nullable=True),
        sa.Column("source_description", sa.Text, nullable=True),
        sa.Column("sha256", sa.String(64), nullable=True),
        sa.Column("metadata", sa.Text, nullable=True),
        sa.Column("host_identifier", sa.String(256), nullable=True),
        sa.Column("source_origin", sa.String(64), nullable=True),
        sa.Column("is_active", sa.Boolean, nullable=False),
        sa.Column("use_in_tasks", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_sources_user_sha256", "sources", ["user_id", "sha256"])
    op.create_table(
        "conversation_sources",
        sa.Column("conversation_id", sa.Integer, sa.ForeignKey("conversations.id"), primary_key=True),
        sa.Column("source_id", sa.Integer, sa.ForeignKey("sources.id"), primary_key=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_conversation_sources_source", "conversation_sources", ["source_id"])
    op.create_table(
        "source_chunks",
        sa.Column("id", big_id, primary_key=True, autoincrement=True),
        sa.Column("source_id", sa.Integer, sa.ForeignKey("sources.id"), nullable=False),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("embedding", sa.LargeBinary, nullable=False),
        sa.Column("dim", sa.Integer, nullable=False),
    )
    op.create_index("ix_source_chunks_source_ordinal", "source_chunks", ["source_id", "ordinal"])


def downgrade() -> None:
    for table in ("source_chunks", "conversation_sources", "sources"):
        op.drop_table(table)

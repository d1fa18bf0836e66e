"""Sources attached to conversations, their conversation links, and embedded text chunks.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import (BIG_ID, created_at, metadata_json, moment, owned_by_user, reference,
                                             serial_id)

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "sources",
        *owned_by_user(),
        sa.Column("source_type", sa.String(32), nullable=False),
        sa.Column("source_name", sa.String(512), nullable=False),
        sa.Column("source_config", sa.Text, nullable=False),
        sa.Column("handler", sa.String(64), nullable=True),
        sa.Column("source_description", sa.Text, nullable=True),
        sa.Column("sha256", sa.String(64), nullable=True),
        metadata_json(),
        sa.Column("host_identifier", sa.String(256), nullable=True),
        sa.Column("source_origin", sa.String(64), nullable=True),
        sa.Column("is_active", sa.Boolean, nullable=False),
        sa.Column("use_in_tasks", sa.Boolean, nullable=False),
        created_at(),
        moment("updated_at"),
        moment("deleted_at"),
    )
    op.create_index("ix_sources_user_sha256", "sources", ["user_id", "sha256"])
    op.create_table(
        "conversation_sources",
        reference("conversation_id", "conversations", primary_key=True),
        reference("source_id", "sources", primary_key=True),
        created_at(),
    )
    op.create_index("ix_conversation_sources_source", "conversation_sources", ["source_id"])
    op.create_table(
        "source_chunks",
        serial_id(BIG_ID),
        reference("source_id", "sources", nullable=False),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("embedding", sa.LargeBinary, nullable=False),
        sa.Column("dim", sa.Integer, nullable=False),
    )
    op.create_index("ix_source_chunks_source_ordinal", "source_chunks", ["source_id", "ordinal"])


def downgrade() -> None:
    for table in ("source_chunks", "conversation_sources", "sources"):
        op.drop_table(table)

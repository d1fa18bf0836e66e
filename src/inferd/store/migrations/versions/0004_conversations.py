"""End users: conversations, messages (one row each, with branches), participants.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import (BIG_ID, created_at, metadata_json, moment, owned_by_user, reference,
                                             serial_id, user_id)

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "conversations",
        *owned_by_user(),
        sa.Column("title", sa.String(512), nullable=True),
        sa.Column("project_id", sa.Integer, nullable=True),
        sa.Column("cloud_agent_task_id", sa.Integer, nullable=True),
        sa.Column("type", sa.String(64), nullable=True),
        sa.Column("is_ephemeral", sa.Boolean, nullable=False),
        moment("archived_at"),
        moment("last_message_at", nullable=False),
        created_at(),
    )
    op.create_index("ix_conversations_user_last", "conversations", ["user_id", "last_message_at"])
    op.create_table(
        "conversation_messages",
        serial_id(BIG_ID),
        reference("conversation_id", "conversations", nullable=False),
        user_id(nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("reasoning_content", sa.Text, nullable=True),
        sa.Column("model_name", sa.String(256), nullable=True),
        sa.Column("tool_call_id", sa.String(128), nullable=True),
        sa.Column("tool_name", sa.String(128), nullable=True),
        sa.Column("tool_status", sa.String(16), nullable=True),
        sa.Column("finish_reason", sa.String(16), nullable=True),
        sa.Column("turn_id", sa.String(64), nullable=True),
        sa.Column("parent_message_id", BIG_ID, sa.ForeignKey("conversation_messages.id"), nullable=True),
        sa.Column("is_read", sa.Boolean, nullable=False),
        sa.Column("attachments", sa.Text, nullable=True),
        metadata_json(),
        sa.Column("tool_calls", sa.Text, nullable=True),
        sa.Column("active", sa.Boolean, nullable=False),
        created_at(),
    )
    op.create_index("ix_conversation_messages_conv_active_id", "conversation_messages",
                    ["conversation_id", "active", "id"])
    op.create_index("ix_conversation_messages_parent", "conversation_messages",
                    ["conversation_id", "parent_message_id"])
    op.create_table(
        "conversation_participants",
        reference("conversation_id", "conversations", primary_key=True),
        reference("user_id", "users", primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        moment("joined_at", nullable=False),
    )
    op.create_index("ix_conversation_participants_user", "conversation_participants", ["user_id"])


def downgrade() -> None:
    for table in ("conversation_participants", "conversation_messages", "conversations"):
        op.drop_table(table)

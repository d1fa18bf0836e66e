"""End users: conversations, messages (one row each, with branches), participants.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "conversations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("org_id", sa.Integer, sa.ForeignKey("orgs.id"), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("title", sa.String(512), nullable=True),
        sa.Column("project_id", sa.Integer, nullable=True),
        sa.Column("cloud_agent_task_id", sa.Integer, nullable=True),
        sa.Column("type", sa.String(64), nullable=True),
        sa.Column("is_ephemeral", sa.Boolean, nullable=False),
        sa.Column("archived_at", sa.DateTime(), nullable=True),
        sa.Column("last_message_at", sa.DateTime(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_conversations_user_last", "conversations", ["user_id", "last_message_at"])
    op.create_table(
        "conversation_messages",
        sa.Column("id", big_id, primary_key=True, autoincrement=True),
        sa.Column("conversation_id", sa.Integer, sa.ForeignKey("conversations.id"), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("reasoning_content", sa.Text, nullable=True),
        sa.Column("model_name", sa.String(256), nullable=True),
        sa.Column("tool_call_id", sa.String(128), nullable=True),
        sa.Column("tool_name", sa.String(128), nullable=True),
        sa.Column("tool_status", sa.String(16), nullable=True),
        sa.Column("finish_reason", sa.String(16), nullable=True),
        sa.Column("turn_id", sa.String(64), nullable=True),
        sa.Column("parent_message_id", big_id, sa.ForeignKey("conversation_messages.id"), nullable=True),
        sa.Column("is_read", sa.Boolean, nullable=False),
        sa.Column("attachments", sa.Text, nullable=True),
        sa.Column("metadata", sa.Text, nullable=True),
        sa.Column("tool_calls", sa.Text, nullable=True),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_conversation_messages_conv_active_id", "conversation_messages",
                    ["conversation_id", "active", "id"])
    op.create_index("ix_conversation_messages_parent", "conversation_messages",
                    ["conversation_id", "parent_message_id"])
    op.create_table(
        "conversation_participants",
        sa.Column("conversation_id", sa.Integer, sa.ForeignKey("conversations.id"), primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("joined_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_conversation_participants_user", "conversation_participants", ["user_id"])


def downgrade() -> None:
    for table in ("conversation_participants", "conversation_messages", "conversations"):
        op.drop_table(table)

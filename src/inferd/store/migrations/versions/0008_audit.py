"""The audit log of administrative changes: who created, changed or revoked
a key or changed an org's settings, over HTTP (an admin key) or the command line (`cli`).

Append-only: nothing updates or deletes a row. Pages are read newest first within one org, so the
index is (org_id, id).

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        # BIGINT on PostgreSQL, INTEGER (the rowid alias, so autoincrement works) on SQLite.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("org_id", sa.Integer, sa.ForeignKey("orgs.id"), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("details", sa.Text, nullable=False),
    )
    op.create_index("ix_audit_log_org_id", "audit_log", ["org_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_org_id", table_name="audit_log")
    op.drop_table("audit_log")

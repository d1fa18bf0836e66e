"""The audit log of administrative changes: who created, changed or revoked
a key or changed an org's settings, over HTTP (an admin key) or the command line (`cli`).

Append-only: nothing updates or deletes a row. Pages are read newest first within one org, so the
index is (org_id, id).

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import BIG_ID, moment, org_id, serial_id

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.create_table(
        "audit_log",
        serial_id(BIG_ID),
        org_id(),
        moment("at", nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("details", sa.Text, nullable=False),
    )
    op.create_index("ix_audit_log_org_id", "audit_log", ["org_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_org_id", table_name="audit_log")
    op.drop_table("audit_log")

"""Files and batches: files, batches, batch lines.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import BIG_ID, created_at, key_id, metadata_json, moment

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.Integer, nullable=False),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        created_at(),
        moment("expires_at"),
    )
    op.create_index("ix_files_org", "files", ["org_id"])
    op.create_index("ix_files_expires", "files", ["expires_at"])
    op.create_table(
        "batches",
        sa.Column("seq", BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("org_id", sa.Integer, nullable=False),
        key_id(nullable=False),
        sa.Column("input_file_id", sa.String(64), nullable=False),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("completion_window", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("validated", sa.Boolean, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("output_file_id", sa.String(64), nullable=True),
        sa.Column("error_file_id", sa.String(64), nullable=True),
        sa.Column("errors", sa.Text, nullable=True),
        metadata_json(),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        moment("lease_until"),
        created_at(),
        moment("expires_at", nullable=False),
        moment("cancelling_at"),
        moment("finished_at"),
    )
    op.create_index("ix_batches_org_seq", "batches", ["org_id", "seq"])
    op.create_index("ix_batches_status", "batches", ["status"])
    op.create_table(
        "batch_lines",
        sa.Column("batch_id", sa.String(64), primary_key=True),
        sa.Column("line_no", sa.Integer, primary_key=True),
        sa.Column("custom_id", sa.String(512), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("result", sa.Text, nullable=True),
    )
    op.create_index("ix_batch_lines_state", "batch_lines", ["batch_id", "state"])


def downgrade() -> None:
    for table in ("batch_lines", "batches", "files"):
        op.drop_table(table)

"""The bytes of stored files in the database (issue 30): `[storage] backend = "postgres"`, the
default on PostgreSQL, keeps each file as numbered chunks of 1 MiB, so replicas and batch workers
with data directories of their own all read the same files, and no upload or download holds a file
whole. A file row's `path` says where its bytes are: `files/<id>.jsonl` in a data directory (as
before), `pg:<id>` here, `s3://bucket/key` in a bucket. No foreign key to `files`: the bytes are
written before the row, and deleted after it.

Revision ID: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    op.create_table(
        "file_chunks",
        sa.Column("file_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("file_chunks")

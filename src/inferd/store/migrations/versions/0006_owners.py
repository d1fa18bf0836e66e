"""Files and batches belong to the key that created them; why a batch was
cancelled (a revoked key stops its batches).

Existing files get an owner where one can be told: an output or error file belongs to its batch's
key, an uploaded input file to the key of the oldest batch that names it. An upload no batch names
keeps a NULL owner: the org's admin keys still see and delete it, application keys do not (under
the old org-wide rule any key of the org could have uploaded it, so no single owner is right).

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import key_id

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.add_column("files", key_id(nullable=True))
    op.add_column("batches", sa.Column("cancel_reason", sa.String(32), nullable=True))
    op.create_index("ix_batches_key_seq", "batches", ["key_id", "seq"])
    # Output/error files are named after their batch (file-out-<hex> for batch_<hex>): a unique-index read.
    op.execute(sa.text(
        "UPDATE files SET key_id = (SELECT b.key_id FROM batches b WHERE b.id = 'batch_' || substr(files.id, 10)) "
        "WHERE files.id LIKE 'file-out-%' OR files.id LIKE 'file-err-%'"))
    # Inputs: the oldest batch that names the file. A temporary index keeps this one pass, not files x batches.
    op.create_index("ix_batches_input_file_tmp", "batches", ["input_file_id", "seq"])
    op.execute(sa.text(
        "UPDATE files SET key_id = (SELECT b.key_id FROM batches b WHERE b.input_file_id = files.id "
        "ORDER BY b.seq LIMIT 1) WHERE files.key_id IS NULL"))
    op.drop_index("ix_batches_input_file_tmp", table_name="batches")


def downgrade() -> None:
    op.drop_index("ix_batches_key_seq", table_name="batches")
    with op.batch_alter_table("batches") as table:
        table.drop_column("cancel_reason")
    with op.batch_alter_table("files") as table:
        table.drop_column("key_id")

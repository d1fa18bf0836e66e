"""Keyword search over source chunks, beside their vectors, and where each chunk lies in its document.

Dense vectors miss exact names, codes and numbers; a word index finds them. The index is kept by
the database itself, so it changes in the same transaction as the chunks, whoever writes them:
- SQLite: an FTS5 table over `source_chunks.text` (external content, Porter stemming), filled and
  emptied by triggers on `source_chunks`;
- PostgreSQL: a stored generated `tsvector` column (English configuration) with a GIN index.
Chunks stored before this revision are indexed here too.

`heading`, `char_start`, `char_end`: the section a chunk comes from and the span of its body in the
extracted text (for citations); NULL on chunks stored before this revision.

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"

_SQLITE_UP = (
    "CREATE VIRTUAL TABLE source_chunks_fts USING fts5(text, content='source_chunks', content_rowid='id', "
    "tokenize='porter unicode61')",
    "CREATE TRIGGER source_chunks_fts_insert AFTER INSERT ON source_chunks BEGIN "
    "INSERT INTO source_chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER source_chunks_fts_delete AFTER DELETE ON source_chunks BEGIN "
    "INSERT INTO source_chunks_fts(source_chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER source_chunks_fts_update AFTER UPDATE OF text ON source_chunks BEGIN "
    "INSERT INTO source_chunks_fts(source_chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO source_chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "INSERT INTO source_chunks_fts(source_chunks_fts) VALUES ('rebuild')",
)
_POSTGRES_UP = (
    "ALTER TABLE source_chunks ADD COLUMN text_search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', text)) STORED",
    "CREATE INDEX ix_source_chunks_text_search ON source_chunks USING gin (text_search)",
)


def upgrade() -> None:
    op.add_column("source_chunks", sa.Column("heading", sa.Text, nullable=True))
    op.add_column("source_chunks", sa.Column("char_start", sa.Integer, nullable=True))
    op.add_column("source_chunks", sa.Column("char_end", sa.Integer, nullable=True))
    statements = _SQLITE_UP if op.get_bind().dialect.name == "sqlite" else _POSTGRES_UP
    for statement in statements:
        op.execute(sa.text(statement))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(sa.text(f"DROP TRIGGER IF EXISTS source_chunks_fts_{trigger}"))
        op.execute(sa.text("DROP TABLE IF EXISTS source_chunks_fts"))
    else:
        op.execute(sa.text("DROP INDEX IF EXISTS ix_source_chunks_text_search"))
        op.execute(sa.text("ALTER TABLE source_chunks DROP COLUMN IF EXISTS text_search"))
    with op.batch_alter_table("source_chunks") as table:
        for column in ("char_end", "char_start", "heading"):
            table.drop_column(column)

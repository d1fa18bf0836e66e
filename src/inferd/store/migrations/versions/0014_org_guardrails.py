"""The guardrails an org has chosen (issue 33): a JSON list of `[[guardrails]]` names, set with
`inferd orgs update ORG --guardrails a,b`; NULL: none chosen (guardrails with `applies_to` still
apply). The names are checked against the configuration file when they are set; a name the file
no longer has is ignored.

Revision ID: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    op.add_column("orgs", sa.Column("guardrails", sa.Text, nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35+, PostgreSQL) rather than a batch rebuild: SQLite
    # cannot drop and recreate `orgs` while rows of other tables name it in foreign keys.
    op.execute("ALTER TABLE orgs DROP COLUMN guardrails")

"""Teams, budgets with a period on keys, teams and orgs, token limits, key allow-lists and
rotation, and the operator's ceiling on an org's models (issue 28).

Spend was kept per key and month (`key_spend`). Budgets now have a period (`day`, `week`, `month`,
`total`) and belong to a key, a team or an org, so spend is kept per owner and UTC day in `spend`
(`scope` is `key`, `team` or `org`; `owner` the access key id, the team id or the org slug): any
period is a sum of at most a few hundred rows of one owner, read once and then counted in memory
or Redis. The upgrade fills it from the usage rows (the truth `key_spend` was summed from); rows
still in a usage journal are added when they are folded, as every row is.

Existing keys keep their budgets and rpm: a NULL `budget_period` is the spec's month. An org's
`allowed_models` stays the operator's list; `admin_models` is what its admin narrowed it to
(NULL: not narrowed).

Revision ID: 0012
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import budget_owner, created_at, key_id, moment, org_id, serial_id

revision = "0012"
down_revision = "0011"


def _day(column: str) -> str:
    """The UTC day of a timestamp column as YYYY-MM-DD, in this database's SQL."""
    if op.get_bind().dialect.name == "postgresql":
        return f"to_char({column}, 'YYYY-MM-DD')"
    return f"substr({column}, 1, 10)"


def upgrade() -> None:
    op.create_table(
        "teams",
        serial_id(),
        org_id(),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("budget_usd", sa.Float, nullable=True),
        sa.Column("budget_period", sa.String(8), nullable=True),
        sa.Column("rpm", sa.Integer, nullable=True),
        sa.Column("tpm", sa.Integer, nullable=True),
        sa.Column("models", sa.Text, nullable=True),
        sa.Column("model_limits", sa.Text, nullable=True),
        created_at(),
        sa.UniqueConstraint("org_id", "name", name="uq_teams_org_name"),
    )
    for column in (sa.Column("team_id", sa.Integer, nullable=True),
                   sa.Column("tpm", sa.Integer, nullable=True),
                   sa.Column("budget_period", sa.String(8), nullable=True),
                   sa.Column("models", sa.Text, nullable=True),
                   sa.Column("model_limits", sa.Text, nullable=True),
                   sa.Column("previous_secret_hash", sa.String(64), nullable=True),
                   moment("previous_secret_until")):
        op.add_column("api_keys", column)
    op.create_index("ix_api_keys_team", "api_keys", ["team_id"])
    op.add_column("orgs", sa.Column("budget_usd", sa.Float, nullable=True))
    op.add_column("orgs", sa.Column("budget_period", sa.String(8), nullable=True))
    op.add_column("orgs", sa.Column("admin_models", sa.Text, nullable=True))
    op.create_table(
        "spend",
        *budget_owner(primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("spend_usd", sa.Float, nullable=False),
    )
    day = _day("created_at")
    op.execute(f"INSERT INTO spend (scope, owner, day, spend_usd) SELECT 'key', key_id, {day}, SUM(cost_usd) "
               f"FROM usage_rows WHERE cost_usd <> 0 GROUP BY key_id, {day}")
    op.execute(f"INSERT INTO spend (scope, owner, day, spend_usd) SELECT 'org', org, {day}, SUM(cost_usd) "
               f"FROM usage_rows WHERE cost_usd <> 0 GROUP BY org, {day}")
    op.drop_table("key_spend")


def downgrade() -> None:
    op.create_table(
        "key_spend",
        key_id(primary_key=True),
        sa.Column("month", sa.String(7), primary_key=True),
        sa.Column("spend_usd", sa.Float, nullable=False),
    )
    op.execute("INSERT INTO key_spend (key_id, month, spend_usd) SELECT owner, substr(day, 1, 7), SUM(spend_usd) "
               "FROM spend WHERE scope = 'key' GROUP BY owner, substr(day, 1, 7)")
    op.drop_table("spend")
    op.drop_index("ix_api_keys_team", table_name="api_keys")
    with op.batch_alter_table("api_keys") as table:
        for name in ("previous_secret_until", "previous_secret_hash", "model_limits", "models", "budget_period",
                     "tpm", "team_id"):
            table.drop_column(name)
    op.drop_table("teams")  # before orgs is rebuilt: SQLite refuses to drop a table a foreign key names
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35+, PostgreSQL) rather than a batch rebuild: SQLite
    # cannot drop and recreate `orgs` while rows of other tables name it in foreign keys.
    for name in ("admin_models", "budget_period", "budget_usd"):
        op.execute(f"ALTER TABLE orgs DROP COLUMN {name}")

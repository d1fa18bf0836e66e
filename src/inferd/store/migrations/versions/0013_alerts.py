"""The durable queue of budget alerts (issue 28).

One row per crossing of 50%, 80% or 100% of a budget in a period: `(scope, owner, period_start,
threshold)` is unique, so however many replicas see the crossing, one row (and one POST) comes of
it. `period_start` is the period's first day, '' for `total` (NULL would defeat the unique key);
`threshold` a percentage (50, 80, 100). `payload` is the JSON body posted, as built when the
crossing was seen. `next_attempt_at` is when the next delivery is due, NULL once delivered or
given up; `claimed_until` keeps other replicas off a row while one delivers it.

Revision ID: 0013
"""

import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import budget_owner, created_at, moment

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.String(40), primary_key=True),
        *budget_owner(nullable=False),
        sa.Column("period_start", sa.String(10), nullable=False),
        sa.Column("threshold", sa.Integer, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        created_at(),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        moment("next_attempt_at"),
        moment("claimed_until"),
        moment("delivered_at"),
        moment("failed_at"),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.UniqueConstraint("scope", "owner", "period_start", "threshold", name="uq_alerts_crossing"),
    )
    op.create_index("ix_alerts_next_attempt", "alerts", ["next_attempt_at"])


def downgrade() -> None:
    op.drop_index("ix_alerts_next_attempt", table_name="alerts")
    op.drop_table("alerts")

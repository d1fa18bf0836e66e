"""Usage reporting: indexes (and rollups) for /v1/usage and /v1/usage/summary.

Revision ID: 0002
"""

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

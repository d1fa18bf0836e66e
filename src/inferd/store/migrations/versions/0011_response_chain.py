"""Stored responses keep their own turn and point at the response they continued (issue 27).

Until now a row's `input_items` held the whole conversation it answered, so a chain of N turns
stored O(N^2). From here a continuation stores only its request's input items and `previous_id`;
the conversation is rebuilt by walking the chain. Existing rows need no rewrite: they have no
`previous_id`, and their `input_items` already hold everything before them, which is exactly where
a walk stops. `deleted_at` hides a deleted response that other rows still continue (their
conversations hold its turn); it goes with the last of them. `previous_id` is indexed for the
"does any row continue this one" checks of deletion and retention.

The downgrade writes every conversation back into its rows (the old shape) and drops hidden rows.

Revision ID: 0011
"""

from typing import Any

import orjson
import sqlalchemy as sa
from alembic import op

from inferd.store.migrations.columns import moment

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.add_column("responses", sa.Column("previous_id", sa.String(64), nullable=True))
    op.add_column("responses", moment("deleted_at"))
    op.create_index("ix_responses_previous_id", "responses", ["previous_id"])


def downgrade() -> None:
    # A response's output becomes the next turn's input items as the service makes them (the
    # service's own function, as 0002 folds rows with the writer's). Should it ever change, this
    # downgrade keeps the 0011 conversion: copy that version here first.
    from inferd.dialects.responses_items import output_as_input

    bind = op.get_bind()
    rows = {row.id: row for row in bind.execute(sa.text(
        "SELECT id, previous_id, input_items, response FROM responses"))}
    before: dict[str, list[dict[str, Any]]] = {}  # id -> the whole conversation before its output

    def whole(response_id: str) -> list[dict[str, Any]]:
        path = []
        at: str | None = response_id
        while at is not None and at not in before and at in rows:
            path.append(at)
            at = rows[at].previous_id
        items = list(before.get(at, [])) if at is not None else []
        for step in reversed(path):
            row = rows[step]
            if row.previous_id is not None:
                parent = rows.get(row.previous_id)
                earlier = items + (output_as_input(orjson.loads(parent.response).get("output") or []) if parent else [])
            else:
                earlier = []
            items = earlier + orjson.loads(row.input_items)
            before[step] = items
        return items

    for response_id, row in rows.items():
        if row.previous_id is not None:
            bind.execute(sa.text("UPDATE responses SET input_items = :items WHERE id = :id"),
                         {"items": orjson.dumps(whole(response_id)).decode(), "id": response_id})
    bind.execute(sa.text("DELETE FROM responses WHERE deleted_at IS NOT NULL"))
    op.drop_index("ix_responses_previous_id", table_name="responses")
    with op.batch_alter_table("responses") as table:
        table.drop_column("deleted_at")
        table.drop_column("previous_id")

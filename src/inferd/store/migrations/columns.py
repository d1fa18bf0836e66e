"""Columns the revisions in versions/ share: ids, references to orgs and users, access key ids, budget
owners, usage dimensions and token counts, metadata and moments.

Here, not in versions/: Alembic loads every module there as a revision. A revision is history, and
the schema it builds must never change, so neither may a builder once a revision calls it: a new
shape of column is a new builder. Each call makes a new Column (a Column belongs to one table).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

# BIGINT on PostgreSQL; INTEGER on SQLite, where only an INTEGER primary key is the rowid alias that
# autoincrements.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def serial_id(type_: Any = sa.Integer) -> sa.Column[Any]:
    """The table's own `id`, numbered by the database."""
    return sa.Column("id", type_, primary_key=True, autoincrement=True)


def reference(name: str, table: str, **options: Any) -> sa.Column[Any]:
    """An INTEGER column naming a row of `table` by its id (`options`: nullable, primary_key)."""
    return sa.Column(name, sa.Integer, sa.ForeignKey(f"{table}.id"), **options)


def org_id() -> sa.Column[Any]:
    """The org a row belongs to."""
    return reference("org_id", "orgs", nullable=False)


def user_id(nullable: bool = False) -> sa.Column[Any]:
    """The user a row belongs to."""
    return reference("user_id", "users", nullable=nullable)


def owned_by_user() -> list[sa.Column[Any]]:
    """The first columns of a user's own things (conversations, sources): their id, org and user."""
    return [serial_id(), org_id(), user_id()]


def key_id(**options: Any) -> sa.Column[Any]:
    """The access key id (a key's public half) of the key a row counts for or belongs to (`options`:
    nullable, primary_key)."""
    return sa.Column("key_id", sa.String(32), **options)


_USAGE_DIMENSION_WIDTHS = {"model": 256, "workspace": 32, "deployment": 256}


def usage_dimension(name: str) -> sa.Column[Any]:
    """`model`, `workspace` or `deployment` of a usage row, as wide in the rollup that groups by it."""
    return sa.Column(name, sa.String(_USAGE_DIMENSION_WIDTHS[name]), nullable=False)


def budget_owner(**options: Any) -> list[sa.Column[Any]]:
    """Whose budget: `scope` (key, team or org) and `owner` (the access key id, team id or org slug)."""
    return [sa.Column("scope", sa.String(8), **options), sa.Column("owner", sa.String(128), **options)]


def metadata_json() -> sa.Column[Any]:
    """`metadata`: a JSON object as text, NULL when there is none."""
    return sa.Column("metadata", sa.Text, nullable=True)


def moment(name: str, nullable: bool = True) -> sa.Column[Any]:
    """A timestamp (naive UTC, as every table stores them); unset until it happens, by default."""
    return sa.Column(name, sa.DateTime(), nullable=nullable)


def created_at() -> sa.Column[Any]:
    """When the row was written."""
    return moment("created_at", nullable=False)


def token_counts(type_: Any) -> list[sa.Column[Any]]:
    """The tokens of a usage row, and of its rollup (summed, so BIGINT there)."""
    return [sa.Column(name, type_, nullable=False)
            for name in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens")]

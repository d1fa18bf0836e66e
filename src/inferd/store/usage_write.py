"""What writing usage rows means, in one place: the rows, what they add to `usage_rollup`, and
what they add to each key's monthly spend (`key_spend`), in the caller's transaction.

Every writer uses these: the usage writer's group commit (metering.py: the async engine on
PostgreSQL, the raw sqlite3 connection on the SQLite hot path) and the batch worker, which commits
a line's row with the line's result. `usage_writes` gives SQLAlchemy statements with their
parameters; `sqlite_usage_writes` the same three writes as SQL for sqlite3, which the hot path
runs without SQLAlchemy (tens of microseconds a commit).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql import Executable

from inferd.store.tables import key_spend, usage_rows
from inferd.store.usage import (ROLLUP_COLUMNS, SQLITE_ROLLUP_UPSERT, dims_hash, hour_period, rollup_deltas,
                                rollup_upsert, rollup_values)

Amounts = dict[tuple[str, str], float]  # (key id, "YYYY-MM") -> USD

_COLUMNS = ("org", "deployment", "key_id", "user_id", "team_id", "model", "workspace", "prompt_tokens",
            "completion_tokens", "cached_prompt_tokens", "latency_ms", "status_code", "cost_usd", "created_at",
            "metadata")
_SQLITE_INSERT = f"INSERT INTO usage_rows ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
_SQLITE_SPEND = ("INSERT INTO key_spend (key_id, month, spend_usd) VALUES (?, ?, ?) ON CONFLICT (key_id, month) "
                 "DO UPDATE SET spend_usd = key_spend.spend_usd + excluded.spend_usd")


def spend_amounts(rows: list[dict[str, Any]]) -> Amounts:
    """What the rows add to each key's spend, by month of their creation."""
    amounts: Amounts = {}
    for row in rows:
        if row["cost_usd"]:
            created = row["created_at"]
            slot = (row["key_id"], f"{created.year:04d}-{created.month:02d}")
            amounts[slot] = amounts.get(slot, 0.0) + row["cost_usd"]
    return amounts


class UsageWrites:
    """The statements that write usage rows on one dialect (built once, reused for every batch)."""

    def __init__(self, dialect: str) -> None:
        self._rollup = rollup_upsert(dialect)
        spend = (pg_insert if dialect == "postgresql" else sqlite_insert)(key_spend)
        self._spend = spend.on_conflict_do_update(index_elements=[key_spend.c.key_id, key_spend.c.month],
                                                  set_={"spend_usd": key_spend.c.spend_usd + spend.excluded.spend_usd})
        self._insert = insert(usage_rows)

    def writes(self, rows: list[dict[str, Any]], amounts: Amounts) -> list[tuple[Executable, list[dict[str, Any]]]]:
        """(statement, parameters) to execute in order, in one transaction."""
        writes: list[tuple[Executable, list[dict[str, Any]]]] = [(self._insert, rows), (self._rollup, rollup_deltas(rows))]
        if amounts:
            writes.append((self._spend, [{"key_id": k, "month": m, "spend_usd": c} for (k, m), c in amounts.items()]))
        return writes


def sqlite_usage_writes(rows: list[dict[str, Any]], amounts: Amounts) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The same writes as `UsageWrites.writes`, as SQL and parameter tuples for sqlite3's executemany."""
    values = [tuple(row["created_at"].isoformat(" ", "microseconds") if c == "created_at" else row[c]
                    for c in _COLUMNS) for row in rows]
    writes: list[tuple[str, list[tuple[Any, ...]]]] = [(_SQLITE_INSERT, values),
                                                        (SQLITE_ROLLUP_UPSERT, rollup_values(rows))]
    if amounts:
        writes.append((_SQLITE_SPEND, [(k, m, c) for (k, m), c in amounts.items()]))
    return writes


# PostgreSQL: the three writes as ONE statement (data-modifying CTEs over unnest()ed arrays), so a
# commit of any number of rows is one round trip in autocommit, prepared once per connection.
# Without SQLAlchemy and its transaction (BEGIN, three statements, COMMIT, a pool ping), a commit
# costs a tenth of the CPU; that is most of a call's cost at concurrency 1 (issue 15).
_PG_ROW_TYPES = ("varchar", "varchar", "varchar", "varchar", "int", "varchar", "varchar", "int", "int", "int", "int",
                 "int", "float8", "timestamp", "text")
_PG_ROLLUP_TYPES = ("varchar",) * 7 + ("text", "bigint", "bigint", "bigint", "bigint", "float8")
_ADDED = ROLLUP_COLUMNS[8:]


def _unnest(types: tuple[str, ...], first: int) -> str:
    return "unnest(" + ", ".join(f"${first + i}::{kind}[]" for i, kind in enumerate(types)) + ")"


PG_USAGE_WRITE = (
    f"WITH new_rows AS (INSERT INTO usage_rows ({', '.join(_COLUMNS)}) "
    f"SELECT * FROM {_unnest(_PG_ROW_TYPES, 1)}), "
    f"rollup AS (INSERT INTO usage_rollup ({', '.join(ROLLUP_COLUMNS)}) "
    f"SELECT * FROM {_unnest(_PG_ROLLUP_TYPES, len(_COLUMNS) + 1)} "
    "ON CONFLICT (key_id, span, period, dims) DO UPDATE SET "
    + ", ".join(f"{name} = usage_rollup.{name} + excluded.{name}" for name in _ADDED) + "), "
    f"spend AS (INSERT INTO key_spend (key_id, month, spend_usd) "
    f"SELECT * FROM {_unnest(('varchar', 'varchar', 'float8'), len(_COLUMNS) + len(ROLLUP_COLUMNS) + 1)} "
    "ON CONFLICT (key_id, month) DO UPDATE SET spend_usd = key_spend.spend_usd + excluded.spend_usd) "
    "SELECT 1"
)


# The same three writes for one row, with scalar parameters: the commit of a call that had no
# company (concurrency 1, light traffic), where asyncpg's encoding of 31 one-element arrays costs
# more client CPU (30-50 us) than the round trip itself. Parameters: the row's columns ($1-$15 in
# _COLUMNS order), its day, hour and month ($16-$18), its rollup dims ($19). The rollup rows go in
# `rollup_deltas` order (day, hour, month), so concurrent writers lock them in one order.
_ONE_ROLLUP_ROW = "($3, '{span}', ${period}, $19, $6, $7, $2, $15, 1, $8, $10, $9, $13)"
PG_ONE_ROW_WRITE = (
    f"WITH new_row AS (INSERT INTO usage_rows ({', '.join(_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i + 1}::{kind}' for i, kind in enumerate(_PG_ROW_TYPES))})), "
    f"rollup AS (INSERT INTO usage_rollup ({', '.join(ROLLUP_COLUMNS)}) VALUES "
    + ", ".join(_ONE_ROLLUP_ROW.format(span=span, period=f"{16 + i}::varchar")
                for i, span in enumerate(("day", "hour", "month")))
    + " ON CONFLICT (key_id, span, period, dims) DO UPDATE SET "
    + ", ".join(f"{name} = usage_rollup.{name} + excluded.{name}" for name in _ADDED) + "), "
    "spend AS (INSERT INTO key_spend (key_id, month, spend_usd) SELECT $3, $18, $13 WHERE $13 <> 0 "
    "ON CONFLICT (key_id, month) DO UPDATE SET spend_usd = key_spend.spend_usd + excluded.spend_usd) "
    "SELECT 1"
)


def pg_one_row_arguments(row: dict[str, Any]) -> list[Any]:
    """PG_ONE_ROW_WRITE's arguments for one row."""
    hour = hour_period(row["created_at"])
    return [*(row[c] for c in _COLUMNS), hour[:10], hour, hour[:7],
            dims_hash(row["model"], row["workspace"], row["deployment"], row["metadata"])]


def pg_usage_arguments(rows: list[dict[str, Any]], amounts: Amounts) -> list[list[Any]]:
    """PG_USAGE_WRITE's arguments: one array per column of the rows, of the rollup deltas (in
    lock order, as `rollup_deltas` sorts them) and of the spend additions (sorted likewise)."""
    arguments: list[list[Any]] = [[row[c] for row in rows] for c in _COLUMNS]
    deltas = rollup_values(rows)
    arguments.extend([delta[i] for delta in deltas] for i in range(len(ROLLUP_COLUMNS)))
    spend = sorted(amounts.items())
    arguments.extend(([k for (k, _), _ in spend], [m for (_, m), _ in spend], [c for _, c in spend]))
    return arguments

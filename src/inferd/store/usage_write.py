"""What writing usage rows means, in one place: the rows, what they add to `usage_rollup`, and
what they add to the daily spend of each key, team and org (`spend`), in the caller's transaction.

Every writer uses these: the folds of the usage journals (SQLite's on a raw sqlite3 connection,
PostgreSQL's in one statement over asyncpg), the group commit of a database without a journal
(metering/group_commit.py) and the batch worker, which commits a line's row with the line's result.
`UsageWrites.writes` gives SQLAlchemy statements with their parameters; `sqlite_usage_writes` the
same three writes as SQL for sqlite3, and `PG_JOURNAL_FOLD` as one PostgreSQL statement, which
the folds run without SQLAlchemy (tens of microseconds a fold).
"""

from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy import insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql import Executable

from inferd.store.tables import spend, usage_rows
from inferd.store.usage import (ROLLUP_WRITES, SQLITE_ROLLUP_UPSERT, rollup_deltas,
                                rollup_upsert, rollup_values)

Amounts = dict[tuple[str, str, str], float]  # (scope, owner, "YYYY-MM-DD") -> USD

_COLUMNS = ("org", "deployment", "key_id", "user_id", "team_id", "model", "workspace", "prompt_tokens",
            "completion_tokens", "cached_prompt_tokens", "latency_ms", "status_code", "cost_usd", "created_at",
            "metadata", "guardrail", "cache_hit", "saved_usd")
# A row journaled before migration 0015 lacks its cache columns: it was no hit.
_ROW_DEFAULTS: dict[str, Any] = {"cache_hit": False, "saved_usd": 0.0}
_SQLITE_INSERT = f"INSERT INTO usage_rows ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
_SQLITE_SPEND = ("INSERT INTO spend (scope, owner, day, spend_usd) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT (scope, owner, day) DO UPDATE SET spend_usd = spend.spend_usd + excluded.spend_usd")


def spend_amounts(rows: Iterable[dict[str, Any]]) -> Amounts:
    """What the rows add to the spend of their key, team and org, by UTC day of their creation."""
    amounts: Amounts = {}
    for row in rows:
        cost = row["cost_usd"]
        if cost:
            day = row["created_at"].date().isoformat()
            for slot in (("key", row["key_id"], day), ("org", row["org"], day)):
                amounts[slot] = amounts.get(slot, 0.0) + cost
            if row["team_id"] is not None:
                slot = ("team", str(row["team_id"]), day)
                amounts[slot] = amounts.get(slot, 0.0) + cost
    return amounts


class UsageWrites:
    """The statements that write usage rows on one dialect (built once, reused for every batch)."""

    def __init__(self, dialect: str) -> None:
        self._rollup = rollup_upsert(dialect)
        upsert = (pg_insert if dialect == "postgresql" else sqlite_insert)(spend)
        self._spend = upsert.on_conflict_do_update(index_elements=[spend.c.scope, spend.c.owner, spend.c.day],
                                                   set_={"spend_usd": spend.c.spend_usd + upsert.excluded.spend_usd})
        self._insert = insert(usage_rows)

    def writes(self, rows: list[dict[str, Any]], amounts: Amounts) -> list[tuple[Executable, list[dict[str, Any]]]]:
        """(statement, parameters) to execute in order, in one transaction."""
        writes: list[tuple[Executable, list[dict[str, Any]]]] = [(self._insert, rows), (self._rollup, rollup_deltas(rows))]
        if amounts:
            writes.append((self._spend, [{"scope": s, "owner": o, "day": d, "spend_usd": c}
                                         for (s, o, d), c in sorted(amounts.items())]))
        return writes


def sqlite_usage_writes(rows: list[dict[str, Any]], amounts: Amounts) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The same writes as `UsageWrites.writes`, as SQL and parameter tuples for sqlite3's executemany."""
    values = [tuple(row["created_at"].isoformat(" ", "microseconds") if c == "created_at"
                    else row.get(c, _ROW_DEFAULTS.get(c)) for c in _COLUMNS) for row in rows]
    writes: list[tuple[str, list[tuple[Any, ...]]]] = [(_SQLITE_INSERT, values),
                                                        (SQLITE_ROLLUP_UPSERT, rollup_values(rows))]
    if amounts:
        writes.append((_SQLITE_SPEND, [(s, o, d, c) for (s, o, d), c in sorted(amounts.items())]))
    return writes


# PostgreSQL: the three writes as ONE statement (data-modifying CTEs over unnest()ed arrays), so a
# fold of any number of rows is one round trip in autocommit, prepared once per connection.
# Without SQLAlchemy and its transaction (BEGIN, three statements, COMMIT, a pool ping), it costs
# a tenth of the CPU (issue 15).
_PG_ROW_TYPES = ("varchar", "varchar", "varchar", "varchar", "int", "varchar", "varchar", "int", "int", "int", "int",
                 "int", "float8", "timestamp", "text", "varchar", "bool",
                 "float8")
_PG_ROLLUP_TYPES = ("varchar",) * 7 + ("text", "bigint", "bigint", "bigint", "bigint", "float8", "bigint", "float8")
_ADDED = ROLLUP_WRITES[8:]


def _unnest(types: tuple[str, ...], first: int) -> str:
    return "unnest(" + ", ".join(f"${first + i}::{kind}[]" for i, kind in enumerate(types)) + ")"


def _pg_usage_write(first: int, only_if: str) -> str:
    """The three writes as CTEs of one statement, arrays from parameter `first` on, each written
    only if the SQL condition `only_if` holds."""
    where = f" WHERE {only_if}"
    rollup_first = first + len(_COLUMNS)
    spend_first = rollup_first + len(ROLLUP_WRITES)
    return (
        f"new_rows AS (INSERT INTO usage_rows ({', '.join(_COLUMNS)}) "
        f"SELECT * FROM {_unnest(_PG_ROW_TYPES, first)}{where}), "
        f"rollup AS (INSERT INTO usage_rollup ({', '.join(ROLLUP_WRITES)}) "
        f"SELECT * FROM {_unnest(_PG_ROLLUP_TYPES, rollup_first)}{where} "
        "ON CONFLICT (key_id, span, period, dims) DO UPDATE SET "
        + ", ".join(f"{name} = usage_rollup.{name} + excluded.{name}" for name in _ADDED) + "), "
        f"spend_days AS (INSERT INTO spend (scope, owner, day, spend_usd) "
        f"SELECT * FROM {_unnest(('varchar', 'varchar', 'varchar', 'float8'), spend_first)}{where} "
        "ON CONFLICT (scope, owner, day) DO UPDATE SET spend_usd = spend.spend_usd + excluded.spend_usd) "
    )


# A fold of a usage journal (metering/fold_pg.py): the rows of bytes `$2` to `$3` of journal
# `$1`, written only if this statement moves the journal's folded length from `$2` to `$3`. Two
# processes folding the same bytes both try; the second waits for the first's row lock, then finds
# the length moved and writes nothing. Returns 1 when it wrote, else 0.
PG_JOURNAL_FOLD = (
    "WITH claim AS (INSERT INTO usage_journal (name, folded) VALUES ($1, $3) "
    "ON CONFLICT (name) DO UPDATE SET folded = excluded.folded WHERE usage_journal.folded = $2 "
    "RETURNING 1), " + _pg_usage_write(4, "EXISTS (SELECT 1 FROM claim)") + "SELECT count(*) FROM claim"
)


def pg_usage_arguments(rows: list[dict[str, Any]], amounts: Amounts) -> list[list[Any]]:
    """PG_JOURNAL_FOLD's arguments after its first three: one array per column of the rows, of the
    rollup deltas (in lock order, as `rollup_deltas` sorts them) and of the spend additions (sorted
    likewise)."""
    arguments: list[list[Any]] = [[row.get(c, _ROW_DEFAULTS.get(c)) for row in rows] for c in _COLUMNS]
    deltas = rollup_values(rows)
    arguments.extend([delta[i] for delta in deltas] for i in range(len(ROLLUP_WRITES)))
    added = sorted(amounts.items())  # in lock order
    arguments.extend(([s for (s, _, _), _ in added], [o for (_, o, _), _ in added], [d for (_, _, d), _ in added],
                      [c for _, c in added]))
    return arguments

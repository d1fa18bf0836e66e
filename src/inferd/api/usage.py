"""GET /v1/usage and GET /v1/usage/summary: the calling key's usage rows and totals; with an admin
key, those of every key of its org."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response

from inferd.api.deps import long_lived_key, services
from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest, NotFound
from inferd.protocol.usage import UsagePage, UsageSummary
from inferd.store.db import utcnow
from inferd.store.usage import SummaryGroup, UsageQuery, UsageRepository, order_groups

router = APIRouter(tags=["usage"])

DEFAULT_WINDOW = timedelta(days=30)
MAX_SUMMARY_WINDOW = timedelta(days=366)
MAX_LIMIT, DEFAULT_LIMIT, MAX_OFFSET = 1000, 100, 100_000
GROUPS = ("model", "workspace", "key_id", "user_id", "team", "day")

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})?")


def rfc3339(moment: datetime) -> str:
    """A naive UTC datetime as RFC 3339 with a `Z`."""
    return moment.isoformat(timespec="microseconds" if moment.microsecond else "seconds") + "Z"


def parse_moment(name: str, value: str) -> datetime:
    """`from`/`to`: RFC 3339, or YYYY-MM-DD meaning UTC midnight; naive UTC back."""
    text = value.strip()
    # An unencoded `+02:00` in a query string arrives as ` 02:00`.
    text = re.sub(r" (\d{2}:\d{2})$", r"+\1", text)
    try:
        if _DATE.fullmatch(text):
            return datetime.strptime(text, "%Y-%m-%d")
        match = _RFC3339.fullmatch(text)
        if match:
            whole, fraction, offset = match.groups()
            fraction = (fraction or "")[:7]  # Python keeps microseconds
            offset = "+00:00" if offset in (None, "Z", "z") else offset
            moment = datetime.fromisoformat(whole.replace("t", "T").replace(" ", "T") + fraction + offset)
            return moment.astimezone(timezone.utc).replace(tzinfo=None)
    except ValueError:
        pass
    raise InvalidRequest(f"{name}: expected an RFC 3339 date-time or YYYY-MM-DD, got {value!r}", param=name)


def _integer(name: str, value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest(f"{name}: expected an integer, got {value!r}", param=name) from None


def _metadata(value: str | None) -> dict[str, str] | None:
    if value is None or value == "":
        return None
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise InvalidRequest("metadata: not valid JSON (expected a URL-encoded JSON object)",
                             param="metadata") from None
    if not isinstance(parsed, dict):
        raise InvalidRequest("metadata: expected a JSON object of string values", param="metadata")
    if not all(isinstance(v, str) for v in parsed.values()):
        raise InvalidRequest("metadata: every value must be a string", param="metadata")
    return parsed or None  # {} is no filter


def _window(start: str | None, end: str | None) -> tuple[datetime, datetime]:
    now = utcnow()
    to = parse_moment("to", end) if end else now
    since = parse_moment("from", start) if start else now - DEFAULT_WINDOW
    if to <= since:
        raise InvalidRequest(f"to: must be strictly after from ({rfc3339(since)}; the default is now minus 30 days)",
                             param="to")
    return since, to


def _paging(limit: str | None, offset: str | None) -> tuple[int, int]:
    page = min(max(_integer("limit", limit, DEFAULT_LIMIT), 1), MAX_LIMIT)  # clamped, never refused
    skip = _integer("offset", offset, 0)
    if skip < 0 or skip > MAX_OFFSET:
        raise InvalidRequest(f"offset: must be between 0 and {MAX_OFFSET}", param="offset")
    return page, skip


def _pagination(limit: int, offset: int, count: int, query: UsageQuery) -> dict[str, Any]:
    return {"limit": limit, "offset": offset, "has_more": count == limit, "from": rfc3339(query.start),
            "to": rfc3339(query.end)}


def _usage_row(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "org": row["org"], "deployment": row["deployment"], "key_id": row["key_id"],
            "user_id": row["user_id"], "model": row["model"], "workspace": row["workspace"],
            "prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"],
            "cached_prompt_tokens": row["cached_prompt_tokens"], "latency_ms": row["latency_ms"],
            "status_code": row["status_code"], "cost_usd": row["cost_usd"], "created_at": rfc3339(row["created_at"]),
            "team_id": row["team_id"], "team": row["team"],
            "metadata": orjson.loads(row["metadata"]) if row["metadata"] else None, "guardrail": row["guardrail"],
            "cache_hit": bool(row["cache_hit"]), "saved_usd": row["saved_usd"]}


def _summary_row(group: SummaryGroup) -> dict[str, Any]:
    return {"group_value": group.group_value, "requests": group.requests, "prompt_tokens": group.prompt_tokens,
            "cached_prompt_tokens": group.cached_prompt_tokens, "completion_tokens": group.completion_tokens,
            "total_tokens": group.prompt_tokens + group.completion_tokens,
            "cost_usd": round(group.cost_usd, 10),  # a rounded float sum, not for invoices
            "cache_hits": group.cache_hits, "saved_usd": round(group.saved_usd, 10)}


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


async def _scope(request: Request, key: KeyRecord, key_id: str | None) -> tuple[str, ...]:
    """The charged keys whose rows the caller sees: its own, or every long-lived key of its org for
    an admin key (user keys' rows carry the key that minted them), narrowed to `key_id` when given."""
    if key.type != "admin":
        return (key.charged_key_id,)
    org_keys = await UsageRepository(services(request).db).org_key_ids(key.org_slug) or ()
    if key_id:
        return (key_id,) if key_id in org_keys else ()  # another org's key: no rows, not a hint it exists
    return org_keys


async def _team(request: Request, key: KeyRecord, team: str | None, team_id: str | None) -> int | None:
    """An admin key's team filter: `team` (a name in its org; 404 when it has none) and/or `team_id`
    (the rows' integer); None when neither is given. Both given and naming different teams: -1,
    which no row carries (no rows, as two filters that exclude each other should give)."""
    wanted: set[int] = set()
    if team_id:
        number = _integer("team_id", team_id, 0)
        wanted.add(number if -2**31 <= number < 2**31 else -1)  # past a 32-bit column: no team, not a 500
    if team:
        found = await UsageRepository(services(request).db).team_id(key.org_slug, team)
        if found is None:
            raise NotFound(f"No team {team!r} in this org", param="team")
        wanted.add(found)
    if not wanted:
        return None
    return wanted.pop() if len(wanted) == 1 else -1


# The query both routes share. `org` is accepted and ignored; `key_id`, `user_id`, `team` and
# `team_id` too for a self-scoped key, which only ever sees its own rows. An admin key filters by them.
async def usage_query(request: Request, key: KeyRecord = Depends(long_lived_key), model: str | None = None,
                      workspace: str | None = None, deployment: str | None = None,
                      metadata: str | None = Query(None, description="URL-encoded JSON object; containment"),
                      start: str | None = Query(None, alias="from",
                                                description="inclusive; RFC 3339 or YYYY-MM-DD"),
                      end: str | None = Query(None, alias="to", description="exclusive; RFC 3339 or YYYY-MM-DD"),
                      org: str | None = None,
                      key_id: str | None = Query(None, description="admin keys: one key of the org"),
                      user_id: str | None = Query(None, description="admin keys: one user of the org"),
                      team: str | None = Query(None, description="admin keys: one team of the org, by name"),
                      team_id: str | None = Query(None, description="admin keys: one team, by id")) -> UsageQuery:
    """The caller's rows (its org's for an admin key) in the window, filtered."""
    since, to = _window(start, end)
    admin = key.type == "admin"
    await services(request).writer.settle()  # rows whose replies have left, still in a journal
    return UsageQuery(key_ids=await _scope(request, key, key_id), start=since, end=to, model=model,
                      workspace=workspace, deployment=deployment, metadata=_metadata(metadata),
                      user_id=user_id if admin and user_id else None,
                      team_id=await _team(request, key, team, team_id) if admin else None)


@router.get("/v1/usage", response_model=UsagePage)
async def list_usage(request: Request, query: UsageQuery = Depends(usage_query),
                     limit: str | None = Query(None, description="1 to 1000, default 100; clamped"),
                     offset: str | None = Query(None, description="0 to 100000")) -> Response:
    """The calling key's usage rows (its org's for an admin key), newest first."""
    page, skip = _paging(limit, offset)
    rows = await UsageRepository(services(request).db).page(query, page, skip)
    return _json({"success": True, "data": [_usage_row(r) for r in rows],
                  "pagination": _pagination(page, skip, len(rows), query)})


@router.get("/v1/usage/summary", response_model=UsageSummary)
async def usage_summary(request: Request, key: KeyRecord = Depends(long_lived_key),
                        query: UsageQuery = Depends(usage_query),
                        group_by: str | None = Query(None, description="model, workspace, key_id, user_id, team, "
                                                                        "day or metadata.<tag_key>"),
                        limit: str | None = None, offset: str | None = None) -> Response:
    """Totals per group, by cost descending."""
    if not group_by:
        raise InvalidRequest("group_by: required (model, workspace, key_id, user_id, team, day or "
                             "metadata.<tag_key>)",
                             param="group_by")
    if group_by not in GROUPS and not (group_by.startswith("metadata.") and len(group_by) > len("metadata.")):
        raise InvalidRequest(f"group_by: unknown value {group_by!r}; expected model, workspace, key_id, user_id, "
                             "team, day or metadata.<tag_key>", param="group_by")
    if query.end - query.start > MAX_SUMMARY_WINDOW:
        raise InvalidRequest("from/to: the summary window may not exceed 366 days", param="from")
    page, skip = _paging(limit, offset)
    # A self-scoped key is one key (and one caller): key_id and user_id collapse to a single group.
    # An admin key sees its whole org: a group per key or per user.
    collapsed = group_by in ("key_id", "user_id") and key.type != "admin"
    groups = await UsageRepository(services(request).db).summary(query, None if collapsed else group_by)
    if collapsed:
        caller = key.charged_key_id if group_by == "key_id" or key.user_id is None else str(key.user_id)
        for group in groups:
            group.group_value = caller
    chosen = order_groups(groups)[skip:skip + page]
    return _json({"success": True, "group_by": group_by, "data": [_summary_row(g) for g in chosen],
                  "pagination": _pagination(page, skip, len(chosen), query)})

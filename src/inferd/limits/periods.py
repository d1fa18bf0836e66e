"""Budget periods in calendar UTC: `day`, `week` (from Monday), `month` and `total` (never resets).

Every budget check asks for the label of its period now, so labels are cached until the next UTC
midnight (formatting dates is not free). `INFERD_CLOCK_SKEW_S` moves this clock and the
timestamps of usage rows (store/db.utcnow) by that many seconds: for drills and tests of the day
a window resets, never for production.
"""

from __future__ import annotations

import functools
import time
from datetime import date, datetime, timedelta, timezone

from inferd.store.db import CLOCK_SKEW
from inferd.store.key_limits import DEFAULT_PERIOD, PERIODS


SKEW_SECONDS = CLOCK_SKEW.total_seconds()


def now() -> float:
    """Seconds since the epoch on the governance clock."""
    return time.time() + SKEW_SECONDS


def period_start(period: str, day: date) -> date | None:
    """The first day of the period holding `day`; None for `total`."""
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    if period == "total":
        return None
    raise ValueError(f"unknown budget period {period!r}")


def period_end(period: str, day: date) -> date | None:
    """The first day after the period holding `day` (when it resets); None for `total`."""
    if period == "day":
        return day + timedelta(days=1)
    if period == "week":
        return day - timedelta(days=day.weekday()) + timedelta(days=7)
    if period == "month":
        return date(day.year + day.month // 12, day.month % 12 + 1, 1)
    if period == "total":
        return None
    raise ValueError(f"unknown budget period {period!r}")


def label(period: str, start: date | None) -> str:
    """The name of one period: `D2026-11-27`, `W2026-11-23` (its Monday), `M2026-11`, `T`."""
    if start is None:
        return "T"
    if period == "month":
        return f"M{start.year:04d}-{start.month:02d}"
    return ("D" if period == "day" else "W") + start.isoformat()


def labels_of_day(day: date) -> tuple[str, str, str, str]:
    """Every period label a day's spend counts in."""
    return (label("day", day), label("week", period_start("week", day)), label("month", day), "T")


class _Today:
    """Today's date and its period labels, recomputed only when a UTC midnight passes."""

    def __init__(self) -> None:
        self._until = 0.0
        self.day = date(1970, 1, 1)
        self.labels: dict[str, str] = {}

    def refresh(self) -> None:
        """Recompute when the day has changed (cheap otherwise: one clock read)."""
        moment = now()
        if moment < self._until:
            return
        today = datetime.fromtimestamp(moment, timezone.utc).date()
        self.day = today
        self.labels = {period: label(period, period_start(period, today)) for period in PERIODS}
        self._until = datetime(today.year, today.month, today.day, tzinfo=timezone.utc).timestamp() + 86400


_today = _Today()


def current_label(period: str) -> str:
    """The label of the period under way."""
    _today.refresh()
    return _today.labels[period]


def today() -> date:
    """Today in UTC, on the governance clock."""
    _today.refresh()
    return _today.day


def window_of(period: str) -> tuple[date | None, date | None]:
    """(first day, first day after) of the period under way."""
    day = today()
    return period_start(period, day), period_end(period, day)


def parse_period(value: str | None) -> str:
    """A period named by a client or an operator (None: the default); ValueError otherwise."""
    if value is None:
        return DEFAULT_PERIOD
    if value not in PERIODS:
        raise ValueError(f"budget period must be one of {', '.join(PERIODS)}")
    return value


def parse_duration(value: str) -> float:
    """`30d`, `12h`, `15m`, `45s` (or a sum such as `1d12h`) as seconds; ValueError otherwise."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    text = value.strip().lower()
    if not text:
        raise ValueError("empty duration")
    total = 0.0
    number = ""
    for char in text:
        if char.isdigit():
            number += char
        elif char in units and number:
            total += int(number) * units[char]
            number = ""
        else:
            raise ValueError(f"malformed duration {value!r}: expected e.g. 30d, 12h, 15m")
    if number:
        raise ValueError(f"malformed duration {value!r}: a number needs a unit (d, h, m, s)")
    return total


def since(period: str) -> str | None:
    """The first day of the period under way as YYYY-MM-DD (None for `total`): what its spend sums from."""
    start = window_of(period)[0]
    return start.isoformat() if start is not None else None


def since_label(period_label: str) -> str | None:
    """The first day (YYYY-MM-DD) of the period a label names; None for `T`."""
    if period_label == "T":
        return None
    if period_label[0] == "M":
        return period_label[1:] + "-01"
    return period_label[1:]


@functools.lru_cache(maxsize=64)
def day_labels(day: str) -> tuple[str, str, str, str]:
    """Every period label the spend of a day (YYYY-MM-DD) counts in."""
    return labels_of_day(date.fromisoformat(day))

"""The `[alerts]` table: where budget alerts are posted and how.

```toml
[alerts]
webhook_url = "https://hooks.example/inferd"   # http or https; required
secret = "…"                                  # HMAC-SHA256 key of x-inferd-signature; required
check_interval_s = 2.0                        # how often each replica looks at spend
retry_base_s = 1.0                            # first retry delay, doubled each time
retry_max_s = 300.0                           # the longest delay between two tries
retry_for_s = 3600.0                          # how long a failing delivery is retried
```

Without the table no alert is detected, queued or sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable
from urllib.parse import urlsplit

from inferd.errors import ConfigError

TABLE = "[alerts]"

# Builds the error naming the file, the table and the key (config.py `_Where.fail`).
Fail = Callable[[str, str | None, str], ConfigError]


@dataclass(frozen=True)
class AlertsConfig:
    """Where budget alerts go, signed with `secret`, and the pace of detection and retries."""

    webhook_url: str
    secret: str = field(repr=False)  # never printed: it signs every alert
    check_interval_s: float = 2.0
    retry_base_s: float = 1.0
    retry_max_s: float = 300.0
    retry_for_s: float = 3600.0


_NUMBERS = ("check_interval_s", "retry_base_s", "retry_max_s", "retry_for_s")


def parse_alerts(fail: Fail, raw: Any) -> AlertsConfig:
    """The checked `[alerts]` table; ConfigError naming the key otherwise."""
    if not isinstance(raw, dict):
        raise fail(TABLE, None, "expected a table")
    known = [f.name for f in fields(AlertsConfig)]
    for key, value in raw.items():
        if key not in known:
            raise fail(TABLE, key, f"unknown key (known: {', '.join(known)})")
        if key in _NUMBERS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise fail(TABLE, key, f"expected int or float, got {type(value).__name__} {value!r}")
            if value <= 0:
                raise fail(TABLE, key, "must be positive")
        elif not isinstance(value, str):
            raise fail(TABLE, key, f"expected str, got {type(value).__name__}")
    for key in ("webhook_url", "secret"):
        if not raw.get(key):
            raise fail(TABLE, key, "missing (alerts are posted to webhook_url, signed with secret)")
    url = urlsplit(raw["webhook_url"])
    if url.scheme not in ("http", "https") or not url.hostname:
        raise fail(TABLE, "webhook_url", "expected an http:// or https:// URL")
    return AlertsConfig(webhook_url=raw["webhook_url"], secret=raw["secret"],
                        **{key: float(raw[key]) for key in _NUMBERS if key in raw})

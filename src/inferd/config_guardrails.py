"""The `[[guardrails]]` tables: checks on the text that goes to a model and comes back.

```toml
[[guardrails]]
name = "no-pii"                 # unique; what an org names and what a refusal cites
kind = "pii"                    # "pii", "deny" or "webhook"
direction = "both"              # "input", "output" or "both"
action = "redact"               # "block", "redact" or "log" (pii and deny)
entities = ["email", "phone"]   # pii: which kinds (default: all of them)
applies_to = "*"                # "*": every org; or a list of org slugs; default: none (orgs opt in)

[[guardrails]]
name = "no-codenames"
kind = "deny"
patterns = ["(?i)project\\s+falcon"]   # regular expressions; bounded ones, or set max_match
max_match = 64                         # deny: the longest text a pattern can match (streams hold this much back)

[[guardrails]]
name = "policy-service"
kind = "webhook"
url = "https://guard.internal/check"
timeout_s = 2.0
failure = "closed"              # "closed" (default): a webhook that fails refuses the call; "open": the call goes on
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from inferd.errors import ConfigError
from inferd.guardrails.pii import KINDS, pattern_width

TABLE = "[[guardrails]]"
GUARDRAIL_KINDS = ("pii", "deny", "webhook")
DIRECTIONS = ("input", "output", "both")
ACTIONS = ("block", "redact", "log")
FAILURES = ("closed", "open")
_KNOWN = ("name", "kind", "direction", "action", "entities", "patterns", "max_match", "url", "timeout_s", "failure",
          "applies_to")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

Fail = Callable[[str, str | None, str], ConfigError]


@dataclass(frozen=True)
class GuardrailConfig:
    """One guardrail as configured (patterns compiled)."""

    name: str
    kind: str
    direction: str = "both"
    action: str = "block"
    entities: tuple[str, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()
    max_match: int | None = None
    url: str | None = None
    timeout_s: float = 2.0
    failure: str = "closed"
    applies_to: tuple[str, ...] | None = None  # ("*",) every org; None: only orgs that name it

    def checks(self, direction: str) -> bool:
        """Whether it looks at text going `direction` ("input" or "output")."""
        return self.direction in (direction, "both")


def _one(fail: Fail, where: str, raw: Any) -> GuardrailConfig:
    if not isinstance(raw, dict):
        raise fail(where, None, "expected a table")
    for key in raw:
        if key not in _KNOWN:
            raise fail(where, key, f"unknown key (known: {', '.join(_KNOWN)})")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail(where, "name", "expected 1-64 letters, digits, '.', '_' or '-'")
    kind = raw.get("kind")
    if kind not in GUARDRAIL_KINDS:
        raise fail(where, "kind", f"expected one of {', '.join(GUARDRAIL_KINDS)}, got {kind!r}")
    direction = raw.get("direction", "both")
    if direction not in DIRECTIONS:
        raise fail(where, "direction", f"expected one of {', '.join(DIRECTIONS)}")
    action = raw.get("action", "block")
    if action not in ACTIONS:
        raise fail(where, "action", f"expected one of {', '.join(ACTIONS)}")
    applies = raw.get("applies_to")
    if applies is not None and applies != "*" and not (
            isinstance(applies, list) and all(isinstance(slug, str) and slug for slug in applies)):
        raise fail(where, "applies_to", 'expected "*" or a list of org slugs')
    common: dict[str, Any] = {"name": name, "kind": kind, "direction": direction, "action": action,
                              "applies_to": None if applies is None else ("*",) if applies == "*" else tuple(applies)}
    for key, kinds in (("entities", ("pii",)), ("patterns", ("deny",)), ("max_match", ("deny",)),
                       ("url", ("webhook",)), ("timeout_s", ("webhook",)), ("failure", ("webhook",))):
        if key in raw and kind not in kinds:
            raise fail(where, key, f"only for kind {' or '.join(kinds)}")
    if kind == "pii":
        entities = raw.get("entities", list(KINDS))
        if not isinstance(entities, list) or not entities or any(e not in KINDS for e in entities):
            raise fail(where, "entities", f"expected a list of {', '.join(KINDS)}")
        return GuardrailConfig(**common, entities=tuple(entities))
    if kind == "deny":
        return _deny(fail, where, raw, common)
    url = raw.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise fail(where, "url", "expected an http:// or https:// URL")
    timeout = raw.get("timeout_s", 2.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise fail(where, "timeout_s", "expected a positive number")
    failure = raw.get("failure", "closed")
    if failure not in FAILURES:
        raise fail(where, "failure", f"expected one of {', '.join(FAILURES)}")
    return GuardrailConfig(**common, url=url, timeout_s=float(timeout), failure=failure)


def _deny(fail: Fail, where: str, raw: dict[str, Any], common: dict[str, Any]) -> GuardrailConfig:
    patterns = raw.get("patterns")
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise fail(where, "patterns", "expected a list of regular expressions")
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise fail(where, "patterns", f"{pattern!r} is not a regular expression: {exc}") from None
    max_match = raw.get("max_match")
    if max_match is not None and (isinstance(max_match, bool) or not isinstance(max_match, int) or max_match < 1):
        raise fail(where, "max_match", "expected a positive integer")
    if max_match is None:
        try:
            for pattern in compiled:
                pattern_width(pattern)
        except ValueError:
            # A stream holds back as much text as a match can span: an unbounded pattern needs a bound.
            raise fail(where, "max_match", f"{pattern.pattern!r} can match text of any length: set max_match") \
                from None
    return GuardrailConfig(**common, patterns=tuple(compiled), max_match=max_match)


def parse_guardrails(fail: Fail, raw: Any) -> tuple[GuardrailConfig, ...]:
    """The checked `[[guardrails]]` tables; ConfigError naming the table and key otherwise."""
    if not isinstance(raw, list):
        raise fail(TABLE, None, "expected an array of tables")
    parsed = tuple(_one(fail, f"{TABLE} #{i + 1}", table) for i, table in enumerate(raw))
    names = [g.name for g in parsed]
    for name in names:
        if names.count(name) > 1:
            raise fail(TABLE, "name", f"{name!r} is configured twice")
    return parsed

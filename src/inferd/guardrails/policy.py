"""Guardrails applied to the texts of one call: the input before an engine sees it, the output
before the client does.

`Guardrails` holds the configured `[[guardrails]]`; `policy(org, named)` is what applies to one
org's calls (None when nothing does, so a call without guardrails pays one lookup and nothing
else). A `Policy` checks input texts (block: 400 `guardrail_blocked`; redact: placeholders; log:
counted only), a whole output text, or a stream of output text (`OutputStream`, holding back only
what a match can span). A webhook guardrail posts `{direction, model, org, texts}` and reads
`{action, texts?}`; one that fails, times out or answers garbage refuses the call (503
`guardrail_unavailable`) unless its `failure` is "open".

Matched text is never logged: a log line names the guardrail, the direction and the action.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import httpx

from inferd.config_guardrails import GuardrailConfig
from inferd.errors import InvalidRequest, ServiceUnavailable
from inferd.guardrails.pii import PLACEHOLDERS, Detector, detect, redact
from inferd.guardrails.stream import StreamRedactor

log = logging.getLogger("inferd.guardrails")

# Counts an action: (guardrail, direction, action) -> None (`inferd_guardrail_actions_total`).
Count = Callable[[str, str, str], None]


class GuardrailBlocked(InvalidRequest):
    """A guardrail refused the request's input."""

    code = "guardrail_blocked"

    def __init__(self, name: str) -> None:
        super().__init__(f"The request was blocked by guardrail '{name}'", code=self.code)
        self.guardrail = name


class GuardrailUnavailable(ServiceUnavailable):
    """A webhook guardrail with `failure = "closed"` could not give its verdict."""

    code = "guardrail_unavailable"

    def __init__(self, name: str) -> None:
        super().__init__(f"Guardrail '{name}' is unavailable; the call was refused", code=self.code)
        self.guardrail = name


@dataclass(frozen=True)
class Verdict:
    """What the guardrails made of some texts: the texts to use, and the guardrail that blocked them."""

    texts: list[str]
    blocked_by: str | None = None


class Guardrail:
    """One configured guardrail, its detector built once."""

    def __init__(self, config: GuardrailConfig, client: httpx.AsyncClient | None) -> None:
        self.config = config
        self._client = client
        self._detector = Detector(config.entities, config.patterns, config.max_match) \
            if config.kind in ("pii", "deny") else None

    def redactor(self) -> StreamRedactor | None:
        """A stream redactor of this guardrail's kinds (None for a webhook)."""
        if self._detector is None:
            return None
        return StreamRedactor(self.config.entities, self.config.patterns, self.config.max_match)

    def scan(self, texts: Sequence[str]) -> tuple[bool, list[str]]:
        """(whether anything matched, the texts redacted) for a pii or deny guardrail."""
        assert self._detector is not None
        found = False
        out = []
        for text in texts:
            matches = detect(self._detector, text)
            found = found or bool(matches)
            out.append(redact(text, matches) if matches else text)
        return found, out

    async def ask(self, direction: str, model: str, org: str, texts: Sequence[str]) -> tuple[str, list[str]]:
        """A webhook's verdict: (action, texts); GuardrailUnavailable (or allow, when its failure is
        "open") when it fails, times out or answers something else than a verdict."""
        config = self.config
        assert self._client is not None and config.url is not None
        try:
            reply = await self._client.post(config.url, json={"direction": direction, "model": model, "org": org,
                                                              "texts": list(texts)}, timeout=config.timeout_s)
            if reply.status_code != 200:
                raise ValueError(f"status {reply.status_code}")
            verdict = reply.json()
            action = verdict.get("action") if isinstance(verdict, dict) else None
            if action not in ("allow", "block", "redact"):
                raise ValueError("no action in the answer")
            if action == "redact":
                changed = verdict.get("texts")
                if not isinstance(changed, list) or len(changed) != len(texts) or \
                        not all(isinstance(t, str) for t in changed):
                    raise ValueError("a redact verdict without one text per text sent")
                return action, changed
            return action, list(texts)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("guardrail %s (%s): the webhook failed: %s", config.name, direction, type(exc).__name__)
            if config.failure == "open":
                return "allow", list(texts)
            raise GuardrailUnavailable(config.name) from None


class Policy:
    """The guardrails that apply to one org's calls, by direction."""

    def __init__(self, input_: list[Guardrail], output: list[Guardrail], count: Count) -> None:
        self.input = input_
        self.output = output
        self.count = count

    async def check(self, direction: str, texts: list[str], model: str, org: str) -> Verdict:
        """Run the guardrails of `direction` over `texts` in their configured order."""
        for guardrail in self.input if direction == "input" else self.output:
            config = guardrail.config
            if config.kind == "webhook":
                action, changed = await guardrail.ask(direction, model, org, texts)
                if action == "allow":
                    continue
            else:
                found, changed = guardrail.scan(texts)
                if not found:
                    continue
                action = config.action
            self.count(config.name, direction, action)
            if action == "block":
                return Verdict(texts, config.name)
            if action == "redact":
                texts = changed
            else:
                log.info("guardrail %s matched the %s (logged only)", config.name, direction)
        return Verdict(texts)

    async def check_input(self, texts: list[str], model: str, org: str) -> list[str]:
        """The input texts as the engine may see them; GuardrailBlocked when one blocks."""
        verdict = await self.check("input", texts, model, org)
        if verdict.blocked_by is not None:
            raise GuardrailBlocked(verdict.blocked_by)
        return verdict.texts

    def output_stream(self, model: str, org: str) -> "OutputStream":
        """A filter for a streamed reply's text."""
        return OutputStream(self, model, org)


class OutputStream:
    """A streamed reply's text through the output guardrails. A `block` or `redact` pii or deny
    guardrail works as the text comes, holding back only what a match can span; a `log` one reads
    the text as it went out, once, at the end (it changes and delays nothing); a webhook sees the
    whole reply at its end, so a stream with one is held back whole."""

    def __init__(self, policy: Policy, model: str, org: str) -> None:
        self._policy = policy
        self._model = model
        self._org = org
        self._filters = [(g, g.redactor()) for g in policy.output
                         if g.config.kind != "webhook" and g.config.action != "log"]
        self._watchers = [g for g in policy.output if g.config.kind != "webhook" and g.config.action == "log"]
        self._webhooks = [g for g in policy.output if g.config.kind == "webhook"]
        self._held: list[str] = []  # the text waiting for the webhooks
        self._sent: list[str] = []  # the text that went out, for the log-only guardrails
        self.blocked_by: str | None = None

    def feed(self, text: str) -> str:
        """The text that may be sent now: once a guardrail blocks, the text before its match, then
        nothing (the caller ends the reply with `finish_reason` `content_filter`)."""
        if self.blocked_by is not None:
            return ""
        for guardrail, redactor in self._filters:
            assert redactor is not None
            text = self._filtered(guardrail, redactor, redactor.feed(text))
            if self.blocked_by is not None:
                return text if not self._webhooks else ""
        if self._webhooks:
            self._held.append(text)
            return ""
        if self._watchers:
            self._sent.append(text)
        return text

    async def flush(self) -> str:
        """The rest of the text at the end of the reply (empty when blocked)."""
        if self.blocked_by is not None:
            return ""
        text = ""
        for guardrail, redactor in self._filters:
            assert redactor is not None
            text = self._filtered(guardrail, redactor, redactor.feed(text) + redactor.flush())
            if self.blocked_by is not None:
                return text if not self._webhooks else ""
        if self._webhooks:
            verdict = await Policy([], self._webhooks, self._policy.count).check(
                "output", ["".join(self._held) + text], self._model, self._org)
            if verdict.blocked_by is not None:
                self.blocked_by = verdict.blocked_by
                return ""
            text = verdict.texts[0]
        if self._watchers:
            await Policy([], self._watchers, self._policy.count).check(
                "output", ["".join(self._sent) + text], self._model, self._org)
        return text

    def _filtered(self, guardrail: Guardrail, redactor: StreamRedactor, text: str) -> str:
        """What a block or redact guardrail lets through of the settled `text`."""
        if not redactor.found:
            return text
        config = guardrail.config
        self._policy.count(config.name, "output", config.action)
        if config.action == "block":
            # What came before the match may go; nothing of the match or after it does.
            self.blocked_by = config.name
            return text[:min((i for i in (text.find(p) for p in PLACEHOLDERS.values()) if i >= 0), default=0)]
        redactor.found = 0  # counted: the next match is counted again
        return text


class Guardrails:
    """Every configured guardrail, and which apply to an org."""

    def __init__(self, configs: Sequence[GuardrailConfig], count: Count) -> None:
        needs_client = any(c.kind == "webhook" for c in configs)
        self._client = httpx.AsyncClient() if needs_client else None
        self._all = {c.name: Guardrail(c, self._client) for c in configs}
        self._count = count
        self._policies: dict[tuple[str, tuple[str, ...]], Policy | None] = {}

    def names(self) -> list[str]:
        return list(self._all)

    def policy(self, org: str, named: tuple[str, ...] = ()) -> Policy | None:
        """The guardrails for `org`: those that apply to every org or name it, and those the org
        names (`named`), in configuration order; None when there are none."""
        cache_key = (org, named)
        if cache_key in self._policies:
            return self._policies[cache_key]
        chosen = [g for g in self._all.values() if g.config.name in named or (
            g.config.applies_to is not None and ("*" in g.config.applies_to or org in g.config.applies_to))]
        policy = Policy([g for g in chosen if g.config.checks("input")],
                        [g for g in chosen if g.config.checks("output")], self._count) if chosen else None
        if len(self._policies) < 10_000:
            self._policies[cache_key] = policy
        return policy

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


# Where one text of a chat request is: (message, what, which): what is "content" (a string content;
# which is 0), "part" (the text of content part `which`) or "arguments" (the arguments of the
# assistant's tool call `which`).
Place = tuple[int, str, int]


def texts_of(messages: Sequence[Any]) -> list[Place]:
    """Where a chat request's texts are: every string content or text part, whatever the role (a
    tool's result is a tool message's content), and the arguments of the tool calls an assistant
    message carries."""
    places: list[Place] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            places.append((i, "content", 0))
        elif isinstance(content, list):
            places.extend((i, "part", j) for j, part in enumerate(content) if isinstance(part, dict)
                          and part.get("type") == "text" and isinstance(part.get("text"), str))
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            places.extend((i, "arguments", k) for k, call in enumerate(calls)
                          if isinstance(call, dict) and isinstance(call.get("function"), dict)
                          and isinstance(call["function"].get("arguments"), str))
    return places


def text_at(messages: Sequence[Any], place: Place) -> str:
    """The text at `place` (one of `texts_of`'s)."""
    i, what, which = place
    message = messages[i]
    if what == "content":
        return str(message["content"])
    if what == "part":
        return str(message["content"][which]["text"])
    return str(message["tool_calls"][which]["function"]["arguments"])


def put_text(messages: list[Any], place: Place, text: str) -> None:
    """Set the text at `place`, copying what it changes (the message, its parts or tool calls):
    the request's own objects are left as they were."""
    i, what, which = place
    message = messages[i] = dict(messages[i])
    if what == "content":
        message["content"] = text
    elif what == "part":
        parts = message["content"] = list(message["content"])
        parts[which] = {**parts[which], "text": text}
    else:
        calls = message["tool_calls"] = list(message["tool_calls"])
        calls[which] = {**calls[which], "function": {**calls[which]["function"], "arguments": text}}

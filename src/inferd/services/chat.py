"""The chat corridor after the limits: catalogue, thinking rules, context fit, engine, metering.

The HTTP route, the batch worker and conversation turns all call this, so a chat is routed and
billed the same way wherever it comes from.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Iterable

from inferd.auth.key_record import KeyRecord
from inferd.cache.key import chat_form
from inferd.cache.service import ResponseCache
from inferd.calls.pacing import Pacer
from inferd.calls.route import affinity_key
from inferd.calls.stage import Answer, CallStage, Metered, StreamLease
from inferd.catalogue import CHAT_TYPES, Deployment, Model, ModelCatalogue
from inferd.engines.base import ChatEngine, TokenCount, estimate_tokens, prompt_upper_bound
from inferd.errors import InferdError, InvalidRequest
from inferd.guardrails.policy import Guardrails, GuardrailUnavailable, Policy, put_text, text_at, texts_of
from inferd.protocol.chat import check_images, check_reasoning_effort
from inferd.services.chat_cache import complete_cached, stream_cached
from inferd.services.chat_call import TEXT_FIELDS, ChatCall, usage_numbers, with_reasoning
from inferd.services.chat_stream import StreamRelay


def apply_thinking(deployment: Model, payload: dict[str, Any]) -> None:
    """Normalise `reasoning_effort` and apply the model's thinking mode (docs/configuration.md, `thinking`)."""
    effort = check_reasoning_effort(payload)
    mode = deployment.config.thinking
    if effort is None or mode == "none":
        payload.pop("reasoning_effort", None)
        return
    if mode == "always" and effort == "off":
        raise InvalidRequest(f"reasoning_effort: model '{deployment.id}' always thinks; 'off' is not accepted",
                             param="reasoning_effort")
    if mode == "never" and effort != "off":
        raise InvalidRequest(f"reasoning_effort: model '{deployment.id}' has no thinking mode; only 'off' is "
                             "accepted", param="reasoning_effort")
    payload["reasoning_effort"] = effort


class ChatService:
    """Routes, runs and meters chat completions through the call stage."""

    def __init__(self, catalogue: ModelCatalogue, stage: CallStage, guardrails: Guardrails | None = None,
                 cache: ResponseCache | None = None) -> None:
        self._catalogue = catalogue
        self._stage = stage
        self._guardrails = guardrails
        self.cache = cache  # the response cache; None when `[cache]` is off (routes test this, nothing more)

    async def use_cache(self, call: ChatCall, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Give a route's call its response-cache ticket and look its entry up, before any engine
        (and before `fit_context`, whose count a hit does not need). Only with the cache on."""
        assert self.cache is not None
        if call.guard is not None and not call.guarded:
            # The input guardrails before the lookup: a hit never answers an input they would
            # block, and the entry is keyed on the (redacted) messages the engine would see.
            await self.guard_input(call)
        ticket = self.cache.ticket(call.key, call.model, "chat", call.payload, chat_form(call.payload), headers)
        if ticket.key is not None:  # bypassed (its header already set): the plain corridor
            call.cache = ticket
            call.hit = await ticket.lookup()

    def _policy(self, key: KeyRecord) -> Policy | None:
        return self._guardrails.policy(key.org_slug, key.org_guardrails) if self._guardrails is not None else None

    async def guard_input(self, call: ChatCall) -> None:
        """Run the input guardrails once, before any engine sees the messages (their texts, tool
        results and tool-call arguments): 400 `guardrail_blocked`, or the matched spans replaced in
        the upstream payload."""
        call.guarded = True
        policy = call.guard
        if policy is None or not policy.input:
            return
        messages = list(call.payload.get("messages") or ())
        places = texts_of(messages)
        if not places:
            return
        texts = [text_at(messages, place) for place in places]
        checked = await policy.check_input(texts, call.model.id, call.key.org_slug)
        for place, before, after in zip(places, texts, checked):
            if after != before:
                put_text(messages, place, after)
        call.payload["messages"] = messages
        call.prompt_count = None  # a count of the text before redaction is not the prompt billed

    async def guard_output(self, call: ChatCall, reply: dict[str, Any]) -> str | None:
        """Run the output guardrails over a blocking reply's text, reasoning and tool-call
        arguments: a blocked message is withheld (`finish_reason` `content_filter`; the guardrail's
        name is returned, for the usage row), a redacted one replaced."""
        policy = call.guard
        if policy is None or not policy.output:
            return None
        blocked = None
        for choice in reply.get("choices") or ():
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            fields = [name for name in TEXT_FIELDS if isinstance(message.get(name), str) and message[name]]
            calls = [c["function"] for c in message.get("tool_calls") or ()
                     if isinstance(c, dict) and isinstance(c.get("function"), dict)
                     and isinstance(c["function"].get("arguments"), str) and c["function"]["arguments"]]
            if not fields and not calls:
                continue
            verdict = await policy.check("output", [message[name] for name in fields] +
                                         [function["arguments"] for function in calls], call.model.id,
                                         call.key.org_slug)
            if verdict.blocked_by is not None:
                for name in fields:
                    message[name] = "" if name == "content" else None
                message.pop("tool_calls", None)
                choice["finish_reason"] = "content_filter"
                blocked = blocked or verdict.blocked_by
            else:
                message.update(zip(fields, verdict.texts))
                for function, text in zip(calls, verdict.texts[len(fields):]):
                    function["arguments"] = text
        return blocked

    def open(self, body: dict[str, Any], key: KeyRecord, *, workspace: str = "chat",
             price_factor: float = 1.0, metadata: dict[str, str] | None = None,
             affinity: str | None = None) -> ChatCall:
        """Resolve the model and build the upstream payload (metadata never goes upstream)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(CHAT_TYPES, "chat completions")
        config = model.config
        if config.image_urls != "any" or "image_input" not in config.capabilities:
            # The one place every dialect's images pass (chat, messages, responses, batch lines).
            check_images(body.get("messages") or (), model.id, "image_input" in config.capabilities,
                         config.image_urls == "data-only")
        payload = dict(body)
        payload.pop("metadata", None)
        payload["model"] = model.deployments[0].upstream
        if payload.get("top_p") is None:
            payload["top_p"] = 1.0  # the spec's default, whatever the engine's own would be
        apply_thinking(model, payload)
        if payload.get("stream"):
            options = payload.get("stream_options")
            # Ask for usage even when the client did not: the final chunk must carry it.
            payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return ChatCall(key, model, payload, metadata, workspace, price_factor,
                        affinity=affinity_key(model, body.get("user"), affinity), guard=self._policy(key))

    def open_count(self, body: dict[str, Any], key: KeyRecord, headers: Iterable[tuple[bytes, bytes]] = ()
                   ) -> ChatCall:
        """The call `/v1/chat/count_tokens` counts: the payload a completion of `body` would send
        (its messages, tools and thinking), so the count equals the billed prompt (`headers`: the
        raw ones, for the affinity key)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(CHAT_TYPES, "token counting")
        payload: dict[str, Any] = {"messages": body["messages"]}
        if body.get("tools"):
            payload["tools"] = body["tools"]
        if body.get("reasoning_effort") is not None:
            payload["reasoning_effort"] = body["reasoning_effort"]
        apply_thinking(model, payload)
        payload["model"] = model.deployments[0].upstream
        return ChatCall(key, model, payload, None, affinity=affinity_key(model, body.get("user"), headers=headers),
                        guard=self._policy(key))

    async def token_count(self, call: ChatCall) -> TokenCount:
        """The prompt's size as a deployment of the model tokenizes it (failing over, never
        metered): what every count_tokens route answers."""
        async def attempt(engine: ChatEngine, deployment: Deployment, model: Model) -> TokenCount:
            return await engine.count_tokens(call.payload_for(deployment))

        if call.guard is not None and not call.guarded:
            await self.guard_input(call)  # the count is of the prompt a completion would bill
        return await self._stage.unmetered(call.model, ChatEngine, call.key, attempt, affinity=call.affinity)

    async def count(self, call: ChatCall) -> int:
        """The prompt's exact size (`token_count`'s number)."""
        return (await self.token_count(call)).input_tokens

    async def count_payload(self, model: Model, key: KeyRecord, payload: dict[str, Any]) -> int:
        """The exact prompt tokens of a chat payload on `model` (never metered)."""
        return await self.count(ChatCall(key, model, payload, None))

    async def fit_context(self, call: ChatCall) -> None:
        """400 when the prompt overflows the window; cap max_tokens at the room left.

        A count is taken only when the cheap upper bound cannot rule both out."""
        if call.hit is not None:
            return  # answered from the response cache: no engine, no count
        if call.guard is not None and not call.guarded:
            await self.guard_input(call)
        window = call.model.config.context_length
        if window is None:
            return
        payload = call.payload
        limit_field = "max_tokens" if payload.get("max_tokens") is not None else "max_completion_tokens"
        max_tokens = payload.get(limit_field)
        bound = prompt_upper_bound(payload)
        if bound + (max_tokens or 0) <= window or (max_tokens is None and bound < window):
            return
        count = await self.count(call)
        call.prompt_count = count
        if count >= window:
            raise InvalidRequest(f"messages: the prompt is {count} tokens, which exceeds the {window}-token "
                                 f"context window of model '{call.model.id}'", code="context_length_exceeded",
                                 param="messages")
        if isinstance(max_tokens, int) and count + max_tokens > window:
            payload[limit_field] = window - count

    async def prompt_tokens(self, call: ChatCall, engine: ChatEngine, deployment: Deployment) -> int:
        """The prompt's size when the engine reported none (estimate if counting fails)."""
        if call.prompt_count is not None:
            return call.prompt_count
        try:
            return (await asyncio.wait_for(engine.count_tokens(call.payload_for(deployment)), 10)).input_tokens
        except (InferdError, asyncio.TimeoutError):
            return estimate_tokens(call.payload)

    async def complete(self, call: ChatCall, *, record: bool = True,
                       pacer: Pacer | None = None) -> Metered[dict[str, Any]]:
        """A blocking completion and its usage, metered (committed, unless `record` is False: then
        the caller commits `usage`) before it is returned; `pacer` caps such calls per deployment
        (batch lines)."""
        if call.cache is not None:
            return await complete_cached(self, call, record, pacer)
        unavailable: GuardrailUnavailable | None = None  # an output webhook that gave no verdict

        async def attempt(engine: ChatEngine, deployment: Deployment, model: Model) -> Answer[dict[str, Any]]:
            nonlocal unavailable
            body = await engine.chat(call.payload_for(deployment))
            numbers = usage_numbers(body.get("usage"))
            if numbers is None:
                text = "".join(str((c.get("message") or {}).get("content") or "") for c in body["choices"]
                               if isinstance(c, dict))
                numbers = (await self.prompt_tokens(call, engine, deployment), (len(text.encode()) + 3) // 4, 0)
                body["usage"] = {"prompt_tokens": numbers[0], "completion_tokens": numbers[1],
                                 "total_tokens": numbers[0] + numbers[1]}
            body["model"] = model.id
            for choice in body["choices"]:
                if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                    with_reasoning(choice["message"])
            # The output guardrails run on the answer before it is metered, so a block is on the
            # usage row.
            blocked = None
            if call.guard is not None:
                try:
                    blocked = await self.guard_output(call, body)
                except GuardrailUnavailable as exc:
                    unavailable = exc  # the engine answered: billed, then refused (no other deployment)
            return Answer(body, *numbers, guardrail=blocked)

        if call.guard is not None and not call.guarded:
            await self.guard_input(call)
        metered = await self._stage.call(call.model, ChatEngine, call.billing, attempt, affinity=call.affinity,
                                         record=record, pacer=pacer)
        if unavailable is not None:
            raise unavailable
        return metered

    def stream(self, call: ChatCall) -> AsyncIterator[bytes]:
        """SSE frames for a streamed completion; the row is durable before `data: [DONE]`.
        Errors before the first frame propagate as exceptions (after failover)."""
        if call.cache is not None:
            return stream_cached(self, call, True)
        return StreamRelay(self, call).frames()

    def chunks(self, call: ChatCall) -> AsyncIterator[dict[str, Any]]:
        """The same stream as parsed chunks, for callers inside the server (generate turns); the
        usage row is durable before the iterator ends, and an error after the first chunk comes
        as a chunk holding `error`."""
        return StreamRelay(self, call).chunks()

    def chunk_batches(self, call: ChatCall) -> AsyncIterator[list[bytes]]:
        """The same stream as the chunks' JSON bytes, every chunk that arrived together in one list,
        so a relay that re-encodes them (the Messages API) sends one write per batch; otherwise as
        `chunks`."""
        if call.cache is not None:
            return stream_cached(self, call, False)
        return StreamRelay(self, call).chunk_batches()

    async def open_stream(self, call: ChatCall) -> StreamLease:
        """The call stage's stream for `call`: started on the first deployment that answered."""
        if call.guard is not None and not call.guarded:
            await self.guard_input(call)
        return await self._stage.open_stream(
            call.model, call.billing,
            lambda engine, deployment, model: engine.chat_stream(call.payload_for(deployment)),
            affinity=call.affinity)



"""One generate turn (POST /v1/conversations/{id}/generate): retrieval, an agentic loop, streamed and stored.

Retrieve first: when the conversation has active sources, the turn searches them before the first
model call (services/retrieval.py: meaning and words fused; a follow-up folds in the exchange
before it) and the model answers from numbered passages (services/grounding.py), so an answer
never depends on a small model deciding to search. The passages are stored as a `search_sources`
tool row of the turn and streamed as a `retrieval` frame; the final `message` frame and the
assistant row's metadata carry the citations. When retrieval finds nothing (or fails), a model
with the `tools` capability may still call `search_sources` (until a search finds passages, or
`max_tool_steps` steps; then it answers without tools).

With `webSearch=true` (for an org with web search on, when `[web_search]` names a provider) the turn
also searches the web with the question (services/web_search.py): the results are more numbered
passages (after the documents'), stored as a `web_search` tool row, streamed as a `web_search`
frame, and cited by URL; a model with tools may search again. A provider that fails gives an
`error` tool row and the model answers without the web: the turn never fails for it.

Every model step goes through the chat corridor (`ChatService`: catalogue, thinking rules,
context fit, engine, one usage row in workspace `conversations`), exactly as an HTTP chat would.
Each step is stored as it ends (assistant tool-call rows, tool rows, the final assistant row, all
sharing a `turn_id`), so an engine failure or a client that leaves keeps what was written and
bills what ran.

The turn runs in its own task and hands frames to the response through a queue: when the client
disconnects, the response is cancelled and the turn task is cancelled once, so its stream relay
still meters what the engine produced.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Mapping

import orjson

from inferd.auth.key_record import KeyRecord
from inferd.catalogue import CHAT_TYPES, Model, ModelCatalogue
from inferd.errors import InferdError, NotFound
from inferd.services import bridging, grounding, retrieval
from inferd.services.chat_call import DONE_FRAME
from inferd.services.generate_check import AnswerChecking
from inferd.services.generate_steps import WORKSPACE, StepOutput, history_messages, sse
from inferd.services.retrieval import Retriever
from inferd.services.web_search import WEB_SEARCH_TOOL, WebSearch, WebSearchFailed, format_results
from inferd.store.conversations import Access, NewMessage

if TYPE_CHECKING:
    from inferd.services.chat import ChatService
    from inferd.services.conversations import ConversationService
    from inferd.tracing.spans import Tracing

log = logging.getLogger("inferd.generate")

DEFAULT_MAX_TOOL_STEPS = 6
DEFAULT_RETRIEVAL_PASSAGES = 6  # chunks retrieved before the first model call; their best pieces are read
DEFAULT_CHAT_MODEL = "fast"
HISTORY_ROWS = 40  # rows of the branch sent to the model, newest last
SYSTEM_PROMPT = ("You are a helpful assistant. Documents the user attached to this conversation can be searched "
                 "with the search_sources tool: use it when the answer may be in them, and answer from what it "
                 "returns.")
TITLE_PROMPT = "Write a title of at most six words for a conversation that starts with the message below. " \
               "Answer with the title only."
ANSWER_NUDGE = "Answer my question from the passages above."
_NOTHING_FOUND = (retrieval.format_hits([]), format_results([]))  # a search tool's empty answers


class GenerateTurn(AnswerChecking):
    """A checked generate request, ready to stream."""

    def __init__(self, generation: "Generation", key: KeyRecord, access: Access, question: dict[str, Any],
                 history: list[dict[str, Any]], resolved: Model, model: str, thinking: bool,
                 has_sources: bool, web: WebSearch | None = None) -> None:
        self._gen = generation
        self._web = web  # None: no web search in this turn
        self._key = key
        self._access = access
        self._question = question
        self._history = history
        self._resolved = resolved
        self._model = model
        self._thinking = thinking
        self._has_sources = has_sources
        self._conversation_id = int(access.conversation["id"])
        self._user_id = key.user_id
        self._turn_id = uuid.uuid4().hex
        self._parent = int(question["id"])
        conversations = generation.settings
        self._max_steps = int(conversations.get("max_tool_steps", DEFAULT_MAX_TOOL_STEPS))
        self._title_model = str(conversations.get("default_chat_model") or DEFAULT_CHAT_MODEL)
        self._retrieval_top_k = int(conversations.get("retrieval_top_k", DEFAULT_RETRIEVAL_PASSAGES))
        self._retrieval_tokens = int(conversations.get("retrieval_tokens", grounding.DEFAULT_RETRIEVAL_TOKENS))

    def frames(self, tasks: set["asyncio.Task[None]"]) -> AsyncIterator[bytes]:
        """The response body: frames the turn task produces; leaving cancels the task (once)."""
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=256)

        async def produce() -> None:
            try:
                await self._run(queue.put)
            except asyncio.CancelledError:
                raise  # the client left: nobody reads on
            except Exception:
                log.exception("generate turn failed in conversation %s", self._conversation_id)
                await queue.put(sse({"error": {"message": "Internal server error", "type": "server_error",
                                               "code": "internal_error"}}))
            await queue.put(None)

        task = asyncio.create_task(produce())
        tasks.add(task)  # held, so the loop does not drop a running turn
        task.add_done_callback(tasks.discard)

        async def consume() -> AsyncIterator[bytes]:
            try:
                while (frame := await queue.get()) is not None:
                    yield frame
            finally:
                if not task.done():
                    task.cancel()

        return consume()

    async def _run(self, emit: Callable[[bytes], Awaitable[None]]) -> None:
        await emit(sse({"conversation_id": self._conversation_id, "title": self._access.conversation["title"]}))
        if self._has_sources:
            await emit(sse({"type": "sources", "conversation_id": self._conversation_id, "active": True}))
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, *history_messages(self._history)]
        try:
            passages = await self._retrieving(messages, emit) if self._has_sources else []
            web_passages = await self._search_web(messages, emit, passages) if self._web is not None else []
            if web_passages:
                passages = [*passages, *web_passages]
                messages[0] = {"role": "system", "content": grounding.WEB_GROUNDED_SYSTEM}
                messages[-1] = {"role": "user", "content": grounding.grounded_question(
                    self._question["message"], passages, "my documents and a web search" if self._has_sources
                    else "a web search")}
            elif passages:
                messages[0] = {"role": "system", "content": grounding.GROUNDED_SYSTEM}
                messages[-1] = {"role": "user", "content": grounding.grounded_question(self._question["message"],
                                                                                      passages)}
            # A search returned passages: the next step answers from them, without tools.
            found = bool(passages)
            # An answer from the documents' passages alone is checked before it is sent, and asked again
            # when it is not drawn from them (services/answer_check.py).
            check = bool(passages) and not web_passages
            searched = False  # found by the model's own search: it is told to answer now
            for step in range(self._max_steps + 1):
                offer_tools = bool(self._tools()) and step < self._max_steps and self._tools_capable() and not found
                # Small models (the built-in 0.5B) keep calling tools unless told to answer now; the
                # nudge goes upstream only and is never stored.
                step_messages = messages + [{"role": "user", "content": ANSWER_NUDGE}] if searched else messages
                checked: dict[str, Any] | None = None
                if check and not offer_tools:
                    output, passages, checked = await self._checked_step(step_messages, passages, emit)
                else:
                    output = await self._step(step_messages, offer_tools, emit, grounded=bool(passages))
                if output is None:
                    return  # an error frame was sent
                calls = output.calls() if offer_tools else []
                if not calls:
                    await self._answer(output, passages, emit, checked)
                    break
                searched = found = await self._tool_step(output, calls, messages, emit)
            await self._title(emit)
            await emit(DONE_FRAME)
        except InferdError as exc:
            await emit(sse({"error": {"message": exc.message, "type": exc.type, "code": exc.code}}))

    def _retrieving(self, messages: list[dict[str, Any]],
                    emit: Callable[[bytes], Awaitable[None]]) -> Awaitable[list[grounding.Excerpt]]:
        """`_retrieve`, inside a span of its own when the request is traced."""
        tracing = self._gen.tracing
        run = self._retrieve(messages, emit)
        return run if tracing is None else tracing.retrieval(run, self._conversation_id)

    async def _retrieve(self, messages: list[dict[str, Any]],
                        emit: Callable[[bytes], Awaitable[None]]) -> list[grounding.Excerpt]:
        """Search the sources for the question before any model call; store what the model will read
        as a tool row of the turn and stream it. Returns the excerpts that fit the model's window
        (none when nothing relevant was found or the search failed: then a model with tools may
        still search)."""
        question = str(self._question["message"])
        queries = grounding.retrieval_queries(self._history, question)
        call_id = f"retrieval_{self._turn_id[:16]}"
        try:
            found = await self._gen.retriever.retrieve(self._key, self._conversation_id, queries,
                                                       self._retrieval_top_k)
            bridges = bridging.bridges_of(question, found)
            if bridges:
                queries = [*queries, *((bridge.query, 1.0) for bridge in bridges)]  # stored with the turn
                found = bridging.joined(found, await self._gen.retriever.retrieve_each(
                    self._key, self._conversation_id, [bridge.query for bridge in bridges], bridging.BRIDGE_SEARCH))
            excerpts = await grounding.condense(partial(self._gen.retriever.embed, self._key), question, found,
                                                self._retrieval_tokens, [bridge.name for bridge in bridges])
            excerpts = await grounding.fit_passages(
                self._resolved, lambda payload: self._gen.chat.count_payload(self._resolved, self._key, payload),
                messages, question, excerpts)
        except InferdError as exc:
            log.warning("retrieval failed in conversation %s: %s", self._conversation_id, exc.message)
            if self._gen.tracing is not None:
                self._gen.tracing.failed(exc)  # the retrieval span's error; the turn goes on
            row_id = await self._save(NewMessage(
                role="tool", message=f"search_sources failed: {exc.message}", user_id=self._user_id,
                tool_call_id=call_id, tool_name="search_sources", tool_status="error", turn_id=self._turn_id,
                metadata={"retrieval": {"queries": [query for query, _ in queries], "error": exc.code}}))
            await emit(sse({"type": "retrieval", "message_id": row_id, "tool_call_id": call_id,
                            "tool_status": "error", "query": question, "passages": [],
                            "error": {"message": exc.message, "type": exc.type, "code": exc.code}}))
            return []
        references = [excerpt.reference(i + 1) for i, excerpt in enumerate(excerpts)]
        shown = "\n\n".join(grounding.passage_block(i + 1, excerpt) for i, excerpt in enumerate(excerpts))
        row_id = await self._save(NewMessage(
            role="tool", message=shown or retrieval.format_hits([]), user_id=self._user_id, tool_call_id=call_id,
            tool_name="search_sources", tool_status="ok", turn_id=self._turn_id,
            metadata={"retrieval": {"queries": [query for query, _ in queries], "passages": references}}))
        await emit(sse({"type": "retrieval", "message_id": row_id, "tool_call_id": call_id, "tool_status": "ok",
                        "query": question, "passages": [{**reference, "text": excerpt.text}
                                                        for reference, excerpt in zip(references, excerpts)]}))
        return excerpts

    async def _answer(self, output: "StepOutput", passages: list[grounding.Excerpt],
                      emit: Callable[[bytes], Awaitable[None]], checked: dict[str, Any] | None = None) -> None:
        """Store the final assistant row with its citations (and what the answer check did) and announce it."""
        finish = "length" if output.finish_reason == "length" else "stop"
        answer = "".join(output.content)
        numbers = grounding.cited(answer, str(self._question["message"]), passages)
        citations = [passages[n - 1].reference(n) for n in numbers]
        final = await self._save(NewMessage(
            role="assistant", message=answer, user_id=self._user_id,
            reasoning_content="".join(output.reasoning) or None, model_name=self._resolved.id,
            finish_reason=finish, turn_id=self._turn_id,
            metadata={"citations": citations, **({"answer_check": checked} if checked else {})} if passages else None))
        frame: dict[str, Any] = {"type": "message", "message_id": final, "finish_reason": finish,
                                 "turn_id": self._turn_id}
        if passages:
            frame["citations"] = citations
        await emit(sse(frame))

    def _tools_capable(self) -> bool:
        return "tools" in self._resolved.config.capabilities

    def _tools(self) -> list[dict[str, Any]]:
        """The tools this turn offers a model that has the `tools` capability."""
        tools = [retrieval.SEARCH_SOURCES_TOOL] if self._has_sources else []
        return [*tools, WEB_SEARCH_TOOL] if self._web is not None else tools

    async def _search_web(self, messages: list[dict[str, Any]], emit: Callable[[bytes], Awaitable[None]],
                          passages: list[grounding.Excerpt]) -> list[grounding.Excerpt]:
        """Search the web with the question before the first model call; store the results as a tool
        row of the turn and stream them. Returns the results that fit the model's window after the
        documents' `passages` (none when the provider failed: the turn goes on without the web)."""
        assert self._web is not None
        question = str(self._question["message"])
        call_id = f"web_search_{self._turn_id[:16]}"
        try:
            results = await self._web.search(question)
        except WebSearchFailed as exc:
            log.warning("web search failed in conversation %s: %s", self._conversation_id, exc)
            row_id = await self._save(NewMessage(
                role="tool", message=f"web_search failed: {exc}", user_id=self._user_id, tool_call_id=call_id,
                tool_name="web_search", tool_status="error", turn_id=self._turn_id,
                metadata={"web_search": {"query": question, "results": [], "error": str(exc)}}))
            await emit(sse({"type": "web_search", "message_id": row_id, "tool_call_id": call_id,
                            "tool_status": "error", "query": question, "results": [],
                            "error": {"message": str(exc), "type": "server_error",
                                      "code": "web_search_unavailable"}}))
            return []
        excerpts = [grounding.Excerpt(result, result.text, None) for result in results if result.text]
        fitted = await grounding.fit_passages(
            self._resolved, lambda payload: self._gen.chat.count_payload(self._resolved, self._key, payload),
            messages, question, [*passages, *excerpts])
        kept = fitted[len(passages):] if len(fitted) > len(passages) else []
        shown = [result.shown() for result in results]
        row_id = await self._save(NewMessage(
            role="tool", message=format_results(results), user_id=self._user_id, tool_call_id=call_id,
            tool_name="web_search", tool_status="ok", turn_id=self._turn_id,
            metadata={"web_search": {"query": question, "results": shown,
                                     "read": [excerpt.passage.url for excerpt in kept]}}))
        await emit(sse({"type": "web_search", "message_id": row_id, "tool_call_id": call_id, "tool_status": "ok",
                        "query": question, "results": shown}))
        return kept

    async def _step(self, messages: list[dict[str, Any]], offer_tools: bool,
                    emit: Callable[[bytes], Awaitable[None]], grounded: bool = False) -> StepOutput | None:
        """One streamed model call through the chat corridor; None when it ended in an error frame."""
        body: dict[str, Any] = {"model": self._model, "messages": messages, "stream": True}
        if grounded:
            body["temperature"] = grounding.GROUNDED_TEMPERATURE
        if offer_tools:
            body["tools"] = self._tools()
            body["tool_choice"] = "auto"
        if not self._thinking and self._resolved.config.thinking == "hybrid":
            body["reasoning_effort"] = "off"
        # A conversation keeps its deployment in an `affinity` pool (the engine's prefix cache holds it).
        call = self._gen.chat.open(body, self._key, workspace=WORKSPACE, affinity=f"conversation:{self._conversation_id}")
        await self._gen.chat.fit_context(call)
        output = StepOutput()
        async with aclosing(self._gen.chat.chunks(call)) as chunks:  # type: ignore[type-var]
            async for event in chunks:
                if "error" in event:
                    await emit(sse({"error": event["error"]}))
                    return None
                for choice in event.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        output.content.append(delta["content"])
                        await emit(sse({"chunk": delta["content"]}))
                    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                    if reasoning:
                        output.reasoning.append(reasoning)
                        await emit(sse({"type": "reasoning", "chunk": reasoning}))
                    for tool_delta in delta.get("tool_calls") or ():
                        output.add_tool_delta(tool_delta)
                    if choice.get("finish_reason"):
                        output.finish_reason = choice["finish_reason"]
        return output

    async def _tool_step(self, output: StepOutput, calls: list[dict[str, Any]], messages: list[dict[str, Any]],
                         emit: Callable[[bytes], Awaitable[None]]) -> bool:
        """Store the tool-call row, run each call, store its result row, extend the messages;
        True when a search returned passages."""
        found = False
        content = "".join(output.content)
        await self._save(NewMessage(role="assistant", message=content, user_id=self._user_id,
                                    reasoning_content="".join(output.reasoning) or None,
                                    model_name=self._resolved.id, finish_reason="tool_calls",
                                    turn_id=self._turn_id, tool_calls=calls))
        messages.append({"role": "assistant", "content": content or None, "tool_calls": calls})
        for call in calls:
            name = call["function"]["name"]
            await emit(sse({"type": "tool_call", "tool_call_id": call["id"], "tool_name": name,
                            "arguments": call["function"]["arguments"]}))
            result, status = await self._run_tool(name, call["function"]["arguments"])
            row_id = await self._save(NewMessage(role="tool", message=result, user_id=self._user_id,
                                                 tool_call_id=call["id"], tool_name=name, tool_status=status,
                                                 turn_id=self._turn_id))
            await emit(sse({"type": "tool_result", "tool_call_id": call["id"], "tool_name": name,
                            "tool_status": status, "message_id": row_id}))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            found = found or (status == "ok" and result not in _NOTHING_FOUND)
        return found

    async def _run_tool(self, name: str, arguments: str) -> tuple[str, str]:
        """(result text, `ok` or `error`) of one tool call; failures go back to the model as text."""
        offered = [tool["function"]["name"] for tool in self._tools()]
        if name not in offered:
            return f"Unknown tool {name!r}; the tools are {', '.join(offered)}.", "error"
        try:
            parsed = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            return f"The arguments were not valid JSON; call {name} with {{\"query\": \"...\"}}.", "error"
        query = parsed.get("query") if isinstance(parsed, dict) else None
        if not isinstance(query, str) or not query.strip():
            return f"{name} needs a non-empty string `query`.", "error"
        if name == "web_search":
            assert self._web is not None
            try:
                return format_results(await self._web.search(query)), "ok"
            except WebSearchFailed as exc:
                return f"web_search failed: {exc}", "error"
        top_k = parsed.get("top_k")
        try:
            hits = await self._gen.retriever.search_sources(
                self._key, self._conversation_id, query,
                top_k if isinstance(top_k, int) and not isinstance(top_k, bool) else retrieval.DEFAULT_TOP_K)
        except InferdError as exc:
            return f"search_sources failed: {exc.message}", "error"
        return retrieval.format_hits(hits), "ok"

    async def _save(self, row: NewMessage) -> int:
        """Append one row of the turn under the previous one; returns its id."""
        row = NewMessage(**{**row.__dict__, "parent_message_id": self._parent})
        [written] = await self._gen.conversations.store.append(self._conversation_id, [row])
        self._parent = int(written["id"])
        return self._parent

    async def _title(self, emit: Callable[[bytes], Awaitable[None]]) -> None:
        """Name an untitled conversation after its first question (default_chat_model, billed here too)."""
        if self._access.conversation["title"] is not None:
            return
        body = {"model": self._title_model, "max_tokens": 24, "messages": [
            {"role": "system", "content": TITLE_PROMPT}, {"role": "user", "content": self._question["message"][:2000]}]}
        try:
            call = self._gen.chat.open(body, self._key, workspace=WORKSPACE)
            reply = (await self._gen.chat.complete(call)).value
            text = str(reply["choices"][0]["message"].get("content") or "")
        except (InferdError, KeyError, IndexError) as exc:
            log.warning("no title for conversation %s: %s", self._conversation_id, exc)
            return
        title = re.sub(r"\s+", " ", text).strip().strip("\"'*#").strip()[:120]
        if title:
            await self._gen.conversations.store.update(self._conversation_id, {"title": title})
            await emit(sse({"type": "title", "conversation_id": self._conversation_id, "title": title}))


@dataclass(frozen=True)
class Generation:
    """What generate turns work with: the catalogue, the chat corridor, the conversations (rows and
    sources), retrieval, and the `[conversations]` settings."""

    catalogue: ModelCatalogue
    chat: "ChatService"
    conversations: "ConversationService"
    retriever: Retriever
    settings: Mapping[str, Any]
    web: WebSearch | None = None  # `[web_search]`'s provider; None: `webSearch=true` is ignored
    tracing: "Tracing | None" = None  # `[tracing]`: the retrieval of a turn is a span of its own

    async def prepare(self, key: KeyRecord, conversation_id: int, message_id: int, model: str,
                      thinking: bool, web_search: bool = False) -> GenerateTurn:
        """Every check that answers before the stream starts: 404 conversation or message, model errors."""
        access = await self.conversations.access(key, conversation_id)
        store = self.conversations.store
        question = await store.message(conversation_id, message_id)
        if question is None or question["user_id"] != key.user_id or question["role"] != "user":
            raise NotFound("message_id is not a saved message of yours in this conversation",
                           code="message_not_found")
        resolved = self.catalogue.resolve(model, key)
        resolved.require_type(CHAT_TYPES, "conversation generate")
        history = await store.ancestry(conversation_id, message_id, HISTORY_ROWS)
        sources = self.conversations.sources
        has_sources = bool(sources is not None and (await sources.counts([conversation_id])).get(conversation_id))
        return GenerateTurn(self, key, access, question, history, resolved, model, thinking, has_sources,
                            self.web if web_search else None)

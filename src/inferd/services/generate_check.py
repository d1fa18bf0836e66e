"""A generate turn's answer check: the answer from retrieved passages is held back until it is
checked (services/answer_check.py); one that is not drawn from the passages leads the model to name
what to search for next, and the model is asked again from the widened passages. A mixin of
`GenerateTurn` (services/generate.py), whose state and steps it uses."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Awaitable, Callable

from inferd.errors import InferdError
from inferd.services import answer_check, grounding, retrieval
from inferd.services.generate_steps import WORKSPACE, StepOutput, sse
from inferd.store.conversations import NewMessage
from inferd.auth.key_record import KeyRecord
from inferd.catalogue import Model

log = logging.getLogger("inferd.generate")


class AnswerChecking:
    """The answer check's steps, on a `GenerateTurn`: what they read of the turn."""

    _question: dict[str, Any]
    _model: str
    _thinking: bool
    _resolved: Model
    _gen: Any  # the turn's Generation (its chat service and retriever)
    _key: KeyRecord
    _conversation_id: int
    _turn_id: str
    _user_id: int | None
    _step: Callable[..., Awaitable[StepOutput | None]]
    _save: Callable[[NewMessage], Awaitable[int]]

    async def _checked_step(self, messages: list[dict[str, Any]], passages: list[grounding.Excerpt],
                            emit: Callable[[bytes], Awaitable[None]]
                            ) -> tuple[StepOutput | None, list[grounding.Excerpt], dict[str, Any] | None]:
        """The answer step from retrieved passages, held back until it is checked: an answer that is
        not drawn from the passages (answer_check.problem) leads the model to name what to search
        for next; that search's new passages join the others (another tool row and `retrieval`
        frame) and the model is asked again, this time to copy the line of the passages that answers.
        The second answer is sent when it passes the check and is a line of the passages as
        written (a fragment such as "2" is not), else the first. Returns (the step sent, the passages it was
        answered from, what the check did: None when the first answer passed)."""
        held: list[bytes] = []

        async def hold(frame: bytes) -> None:
            held.append(frame)

        async def release(frames: list[bytes]) -> None:
            for frame in frames:
                await emit(frame)

        question = str(self._question["message"])
        first = await self._step(messages, False, hold, grounded=True)
        kind = None if first is None else answer_check.problem("".join(first.content), question, passages)
        if first is None or kind is None:
            await release(held)
            return first, passages, None
        answer = "".join(first.content)
        query = await self._next_query(messages, answer, question)
        more = await self._search_more(query, question, passages, messages, emit)
        widened = [*passages, *more]
        again = [*messages[:-1], {"role": "user", "content": grounding.grounded_question(
            question, widened, rules=answer_check.QUOTE_RULES)}]
        second_held: list[bytes] = []

        async def hold_second(frame: bytes) -> None:
            second_held.append(frame)

        second = await self._step(again, False, hold_second, grounded=True)
        text = "".join(second.content) if second is not None else ""
        if second is not None and answer_check.problem(text, question, widened) is None \
                and answer_check.quoted(text, widened):
            await release(second_held)
            return second, widened, {"problem": kind, "query": query, "answer": "second", "first": answer}
        await release(held)
        return first, widened, {"problem": kind, "query": query, "answer": "first",
                                "second": "".join(second.content) if second is not None else None}

    async def _next_query(self, messages: list[dict[str, Any]], answer: str, question: str) -> str:
        """What the model, having read the passages and answered `answer`, says to search for next
        (the question itself when it names nothing)."""
        body: dict[str, Any] = {"model": self._model, "max_tokens": answer_check.QUERY_TOKENS,
                                "temperature": grounding.GROUNDED_TEMPERATURE, "messages": [
                                    *messages, {"role": "assistant", "content": answer},
                                    {"role": "user", "content": answer_check.SEARCH_NEXT}]}
        if not self._thinking and self._resolved.config.thinking == "hybrid":
            body["reasoning_effort"] = "off"
        try:
            call = self._gen.chat.open(body, self._key, workspace=WORKSPACE,
                                       affinity=f"conversation:{self._conversation_id}")
            await self._gen.chat.fit_context(call)
            reply = (await self._gen.chat.complete(call)).value
            text = str(reply["choices"][0]["message"].get("content") or "")
        except (InferdError, KeyError, IndexError, TypeError) as exc:
            log.warning("no next search in conversation %s: %s", self._conversation_id, exc)
            text = ""
        return answer_check.search_query(text, question)

    async def _search_more(self, query: str, question: str, passages: list[grounding.Excerpt],
                           messages: list[dict[str, Any]],
                           emit: Callable[[bytes], Awaitable[None]]) -> list[grounding.Excerpt]:
        """Search the sources for `query` (with the question beside it, weighed less); the passages
        the first search did not find, condensed, stored as another `search_sources` tool row of
        the turn, numbered after the first ones. [] when the search finds nothing new or fails."""
        call_id = f"retrieval_{self._turn_id[:12]}_next"
        queries = [(query, 1.0), (f"{query} {question}", 0.5)]
        seen = {excerpt.passage.chunk_id for excerpt in passages if isinstance(excerpt.passage, retrieval.Passage)}
        try:
            found = await self._gen.retriever.retrieve(self._key, self._conversation_id, queries,
                                                       answer_check.SEARCH_TOP_K)
            new = [passage for passage in found if passage.chunk_id not in seen][:answer_check.NEW_PASSAGES]
            excerpts = await grounding.condense(partial(self._gen.retriever.embed, self._key), f"{query}. {question}",
                                                new, answer_check.NEW_TOKENS) if new else []
            excerpts = (await grounding.fit_passages(
                self._resolved, lambda payload: self._gen.chat.count_payload(self._resolved, self._key, payload),
                messages, question, [*passages, *excerpts]))[len(passages):]
        except InferdError as exc:
            log.warning("second search failed in conversation %s: %s", self._conversation_id, exc.message)
            return []
        first = len(passages) + 1
        references = [excerpt.reference(first + i) for i, excerpt in enumerate(excerpts)]
        shown = "\n\n".join(grounding.passage_block(first + i, excerpt) for i, excerpt in enumerate(excerpts))
        row_id = await self._save(NewMessage(
            role="tool", message=shown or retrieval.format_hits([]), user_id=self._user_id, tool_call_id=call_id,
            tool_name="search_sources", tool_status="ok", turn_id=self._turn_id,
            metadata={"retrieval": {"queries": [text for text, _ in queries], "passages": references}}))
        await emit(sse({"type": "retrieval", "message_id": row_id, "tool_call_id": call_id, "tool_status": "ok",
                        "query": query, "passages": [{**reference, "text": excerpt.text}
                                                     for reference, excerpt in zip(references, excerpts)]}))
        return excerpts

"""A fake upstream engine speaking the OpenAI chat-completion wire shape (and vLLM's /tokenize).

This is the only stand-in the test suite uses: a GPU engine cannot run here. It is a real HTTP
server on 127.0.0.1. Its behaviour is chosen by the `model` the gateway sends upstream:

- `mock`                 a 16-word reply (one SSE chunk per word when streaming)
- `mock-sleep-<S>`       waits S seconds (float) before answering at all
- `mock-hang`            never answers; records an abort (`chunks_sent` 0) once the client goes away
- `mock-stall-after-<N>` streams N chunks, then sends nothing more (mid-stream timeout)
- `mock-drop-after-<N>`  streams N chunks, then closes the connection without a terminator
- `mock-error-<STATUS>`  answers STATUS with an upstream-shaped error body
- `mock-throttle-<S>`    answers 429 with `Retry-After: S`
- `mock-drip-<S>`        streams with S seconds between chunks (records an abort when the client leaves)
- `mock-reasoning`       also returns `reasoning_content` (message and deltas)
- `mock-echo`            answers with the last message's text as it arrived (streamed one word per chunk)
- `mock-echo-think`      the same text as its reasoning (`reasoning_content`, one word per chunk), then
                         the answer "done"
- `mock-echo-cut-<N>`    answers as `mock-echo`, streamed in pieces of N characters, 20 ms apart (a value
                         cut across chunks)
- `mock-nousage`         never reports usage
- `mock-flaky-<N>`       answers 503 to the first N requests with the same messages, then normally
- `mock-agent`           (streams) calls the first offered tool with `{"query": <last user message>}`,
                         then, once a tool result is in the messages, answers "From the sources: " and
                         the result's first 40 words (`mock-agent-loop`: always calls the tool, with
                         an empty query;
                         `mock-agent-drop`: after the tool result, two words, then the connection closes)
- `mock-tools`           like `mock-agent`, blocking too: calls the tool `tool_choice` names (else the first
                         offered) with `{"query": <last user message>}`, unless `tool_choice` is "none" or a
                         tool result came after the last assistant message (then the answer draws on it)
- `mock-stops`           honours `stop` as whole words of the reply and, like vLLM, names the stop string
                         that ended it in the choice's `stop_reason`
- `mock-crash`           answers 500 with a traceback naming a file path and an internal host
- `mock-error-echo`      answers 500 with a plain-text body quoting the last message's content as sent
                         (an engine that echoes its input in an error: a log line must not be forged)
- `mock-grounded`        (streams) reads the passages (`From <source>:` blocks) and the `Question:` line of
                         the last user message, and answers with the sentence of the passage sharing most
                         words with the question, then ` [n]`, n its place among the passages
                         (`mock-grounded-plain`: without the marker);
                         "The documents do not say." when the message holds no passages
                         (`mock-grounded-retry`: answers with the question itself, unless the message
                         asks to copy the line that answers: then as `mock-grounded`, without the marker)

Whatever the model, a request whose bearer starts with `rejected-` is answered 401 and one whose
bearer starts with `forbidden-` 403 (OpenAI's shape), on every route: a wrong `api_key` in the
gateway's configuration.

Every request body received is recorded; `GET /_requests` returns them, `POST /_reset` clears.
`GET /_in_flight` says how many chat requests are being answered now and the most at once since
the last reset (`{"now": N, "peak": M, "received": R}`, R: chat requests ever received): a pacing test's view of one deployment.
`GET /health` answers 200 (a pool's active health probe). Several fakes may run at once, each on
its own port (`--port P` again after a SIGKILL brings one back where it was).
Streams the client abandoned are recorded too: `GET /_aborts` lists `{model, chunks_sent}`.
Token counts are deterministic (`count_prompt_tokens`), so /tokenize equals the billed usage.

Run: `python tests/fakes/upstream.py --port 9100` (prints `ready <port>` when listening).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import struct
import time
import zlib
from typing import Any

from aiohttp import web

REPLY_WORDS = "This is the mock upstream answering your request with sixteen words of plain text for you".split()
MAX_MODEL_LEN = 4096
# What the fake answers a transcription asked for in a plain format; when the form's `model` is
# `mock-edges`, with a leading space and trailing blank lines that a relay which re-encodes or
# trims would lose.
PLAIN_TRANSCRIPTS = {
    "text": b"fake transcript",
    "srt": b"1\n00:00:00,000 --> 00:00:01,500\nfake transcript\n\n",
    "vtt": b"WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nfake transcript\n\n",
}
EDGE_TRANSCRIPTS = {
    "text": b" fake transcript\n\n",
    "srt": b"1\n00:00:00,000 --> 00:00:01,500\n fake transcript\n\n\n",
    "vtt": b"WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nfake transcript \n\n",
}
CRASH_TRACE = ('Traceback (most recent call last):\n  File "/srv/engine/worker.py", line 12, in generate\n'
               "RuntimeError: lost the worker at 10.1.2.3:8000")


def _content_words(content: Any) -> int:
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):
        return sum(len(str(part.get("text", "")).split()) + (85 if part.get("type") == "image_url" else 0)
                   for part in content if isinstance(part, dict))
    return 0


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """Deterministic prompt token count: 4 per message, one per word, tool schemas by words."""
    total = 2
    for message in body.get("messages") or []:
        total += 4 + _content_words(message.get("content"))
        for call in message.get("tool_calls") or []:
            total += len(json.dumps(call).split())
    if body.get("tools"):
        total += len(json.dumps(body["tools"]).split())
    effort = body.get("reasoning_effort") or (body.get("chat_template_kwargs") or {}).get("reasoning_effort")
    if effort in ("low", "medium", "high"):
        total += {"low": 1, "medium": 2, "high": 3}[effort]
    if "prompt" in body:
        total = 2 + len(str(body["prompt"]).split())
    return total


def tiny_png(width: int, height: int) -> bytes:
    """A valid grey PNG of the given size."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def fake_embedding(text: str) -> list[float]:
    """A deterministic 8-dimensional vector for a text."""
    seed = sum(ord(ch) * (i + 1) for i, ch in enumerate(text))
    return [((seed * (k + 3)) % 997) / 997.0 - 0.5 for k in range(8)]


def fake_relevance(query: str, document: str) -> float:
    """The share of the query's words found in the document, in [0, 1]."""
    words = set(query.lower().split())
    return len(words & set(document.lower().split())) / len(words) if words else 0.0


def _reply_words(body: dict[str, Any]) -> tuple[list[str], str]:
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    words = list(REPLY_WORDS)
    if body.get("model") in ("mock-echo", "mock-echo-think") or str(body.get("model")).startswith("mock-echo-cut-"):
        messages = body.get("messages") or [{}]
        content = messages[-1].get("content")
        text = content if isinstance(content, str) else " ".join(
            str(p.get("text") or "") for p in content or () if isinstance(p, dict))
        words = text.split(" ")
    if isinstance(max_tokens, int) and max_tokens < len(words):
        return words[:max_tokens], "length"
    return words, "stop"


def _usage(body: dict[str, Any], completion: int) -> dict[str, Any]:
    prompt = count_prompt_tokens(body)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": prompt // 2}}


def _suffix_number(model: str, prefix: str) -> float | None:
    if model.startswith(prefix):
        try:
            return float(model[len(prefix):])
        except ValueError:
            return None
    return None


def _grounded_answer(body: dict[str, Any], model: str) -> list[str]:
    """`mock-grounded*`: the best-matching sentence of the best-matching passage, cited by its place."""
    messages = body.get("messages") or []
    text = str((messages[-1] if messages else {}).get("content") or "")
    if model == "mock-grounded-retry" and "Copy from the passages" not in text:
        return text.split("\n", 1)[0].removeprefix("Question: ").split()  # restates the question
    question = re.search(r"^Question: (.*)$", text, re.MULTILINE)
    found = re.findall(r"^From [^\n]*:\n(.*?)(?=\n\n|\Z)", text, re.MULTILINE | re.DOTALL)
    blocks = [(str(i + 1), block) for i, block in enumerate(found)]
    if question is None or not blocks:
        return "The documents do not say.".split()
    asked = set(re.findall(r"\w+", question.group(1).lower()))

    def overlap(piece: str) -> int:
        return len(asked & set(re.findall(r"\w+", piece.lower())))

    number, passage = max(blocks, key=lambda block: overlap(block[1]))
    sentence = max(re.split(r"(?<=[.!?])\s+|\n", passage), key=overlap).strip()
    return (sentence + ("" if model in ("mock-grounded-plain", "mock-grounded-retry") else f" [{number}]")).split()


def _agent_step(body: dict[str, Any], model: str) -> tuple[list[Any], str]:
    """`mock-agent*`: tool-call deltas (finish `tool_calls`), or answer words drawn from the tool result."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    tools = body.get("tools") or []
    if tools and (last.get("role") != "tool" or model == "mock-agent-loop"):
        question = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        arguments = json.dumps({"query": "" if model == "mock-agent-loop" else question})
        call_id = f"call_{len(messages)}"
        name = tools[0]["function"]["name"]
        return [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}},
                {"index": 0, "function": {"arguments": arguments[:5]}},
                {"index": 0, "function": {"arguments": arguments[5:]}}], "tool_calls"
    result = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "tool"), None)
    if result is None:
        return list(REPLY_WORDS), "stop"
    return ["From", "the", "sources:", *result.split()[:40]], "stop"


def _tools_step(body: dict[str, Any]) -> tuple[list[Any], str]:
    """`mock-tools`: `_agent_step`, with the tool `tool_choice` names and no call under "none"."""
    choice = body.get("tool_choice")
    if choice == "none":
        return list(REPLY_WORDS), "stop"
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        named = [t for t in body.get("tools") or [] if t["function"]["name"] == choice["function"]["name"]]
        body = {**body, "tools": named or body.get("tools")}
    messages = body.get("messages") or []
    roles = [m.get("role") for m in messages]
    if "tool" in roles and roles[::-1].index("tool") < (roles[::-1] + ["assistant"]).index("assistant"):
        # A user's words after the tool results of the same turn: answer from the results all the same.
        body = {**body, "messages": messages[:len(roles) - roles[::-1].index("tool")]}
    return _agent_step(body, "mock-tools")


def _stopped(body: dict[str, Any], words: list[str], finish: str) -> tuple[list[str], str, str | None]:
    """`mock-stops`: the words before the first that is a `stop` string, and that string."""
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else stops
    for index, word in enumerate(words):
        if word in stops:
            return words[:index], "stop", word
    return words, finish, None


def _tool_message(deltas: list[Any]) -> dict[str, Any]:
    """The blocking message of `_agent_step`'s tool-call deltas."""
    arguments = "".join(delta["function"]["arguments"] for delta in deltas)
    first = deltas[0]
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": first["id"], "type": "function",
                            "function": {"name": first["function"]["name"], "arguments": arguments}}]}


class FakeUpstream:
    """The fake's state: recorded requests."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.chats_received = 0  # every chat request ever, unlike `requests` (the last 200)
        self.aborts: list[dict[str, Any]] = []
        self.flaky: dict[str, int] = {}
        self.in_flight = 0
        self.peak_in_flight = 0

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._chat(request)
        finally:
            self.in_flight -= 1

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"path": request.path, "body": body,
                              "authorization": request.headers.get("Authorization"),
                              "request_id": request.headers.get("x-request-id"),
                              "traceparent": request.headers.get("traceparent")})
        del self.requests[:-200]
        self.chats_received += 1
        model = str(body.get("model", ""))
        sleep = _suffix_number(model, "mock-sleep-")
        if sleep:
            await asyncio.sleep(sleep)
        if model == "mock-hang":
            return await self._hang(request, model)
        flaky = _suffix_number(model, "mock-flaky-")
        if flaky:
            messages = json.dumps(body.get("messages"))
            seen = self.flaky[messages] = self.flaky.get(messages, 0) + 1
            if seen <= flaky:
                return web.json_response({"error": {"message": "overloaded", "type": "server_error", "code": 503}},
                                         status=503)
        if model == "mock-crash":
            return web.Response(status=500, text=CRASH_TRACE)
        if model == "mock-error-echo":
            last = (body.get("messages") or [{}])[-1]
            return web.Response(status=500, text=f"cannot answer: {last.get('content')}")
        wait = _suffix_number(model, "mock-throttle-")
        if wait is not None:
            return web.json_response({"object": "error", "message": "too many requests", "type": "RateLimitError",
                                      "code": 429}, status=429, headers={"Retry-After": str(int(wait))})
        status = _suffix_number(model, "mock-error-")
        if status:
            return web.json_response(
                {"object": "error", "message": f"This model's maximum context length is {MAX_MODEL_LEN} tokens.",
                 "type": "BadRequestError", "param": "messages", "code": int(status)}, status=int(status))
        if body.get("stream"):
            return await self._stream(request, body, model)
        words, finish = _reply_words(body)
        stop_reason = None
        if model == "mock-stops":
            words, finish, stop_reason = _stopped(body, words, finish)
        if model == "mock-tools":
            words, finish = _tools_step(body)
        if finish == "tool_calls":
            message: dict[str, Any] = _tool_message(words)
            words = [""]  # about one completion token per call
        else:
            message = {"role": "assistant", "content": " ".join(words), "tool_calls": []}
        if model == "mock-reasoning":
            message["reasoning_content"] = "thinking about it"
        if model == "mock-echo-think":
            message["reasoning_content"], message["content"] = message["content"], "done"
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if model == "mock-stops":
            choice["stop_reason"] = stop_reason
        reply: dict[str, Any] = {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [choice],
        }
        if model != "mock-nousage":
            reply["usage"] = _usage(body, len(words))
        return web.json_response(reply)

    async def _hang(self, request: web.Request, model: str) -> web.Response:
        """An engine call that never ends: wait until the client closes the connection."""
        try:
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.05)
        finally:
            self.aborts.append({"model": model, "chunks_sent": 0})
        return web.Response(status=499)

    async def _stream(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        stall = _suffix_number(model, "mock-stall-after-")
        drop = _suffix_number(model, "mock-drop-after-")
        drip = _suffix_number(model, "mock-drip-")
        words, finish = _reply_words(body)
        created = int(time.time())

        stop_reason = None
        if model == "mock-stops":
            words, finish, stop_reason = _stopped(body, words, finish)

        def frame(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            if model == "mock-stops" and finish_reason:
                choice["stop_reason"] = stop_reason
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [choice]}
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        async def write_split(data: bytes) -> None:
            # Split every frame across two writes so the gateway must buffer to the blank line.
            half = len(data) // 2
            await response.write(data[:half])
            await response.write(data[half:])

        await write_split(frame({"role": "assistant", "content": ""}))
        if model.startswith("mock-agent") or model == "mock-tools":
            words, finish = _tools_step(body) if model == "mock-tools" else _agent_step(body, model)
            if finish == "tool_calls":
                for delta in words:
                    await write_split(frame({"tool_calls": [delta]}))
                words = []
            elif model == "mock-agent-drop":
                drop = 2
        if model.startswith("mock-grounded"):
            words = _grounded_answer(body, model)
        if model == "mock-reasoning":
            await write_split(frame({"reasoning_content": "thinking"}))
        cut = _suffix_number(model, "mock-echo-cut-")
        if cut:
            text = " ".join(words)
            for start in range(0, len(text), int(cut)):
                await asyncio.sleep(0.02)
                await write_split(frame({"content": text[start:start + int(cut)]}))
            words = []
        if model == "mock-echo-think":
            for index, word in enumerate(words):
                await write_split(frame({"reasoning_content": (" " if index else "") + word}))
            words = ["done"]
        for index, word in enumerate(words):
            if stall is not None and index >= stall:
                await asyncio.sleep(3600)
            if drop is not None and index >= drop:
                request.transport.close()  # type: ignore[union-attr]
                return response
            if drip:
                try:
                    await asyncio.sleep(drip)
                    await write_split(frame({"content": (" " if index else "") + word}))
                except (ConnectionResetError, asyncio.CancelledError):
                    self.aborts.append({"model": model, "chunks_sent": index})
                    raise
                continue
            await write_split(frame({"content": (" " if index else "") + word}))
        await write_split(frame({}, finish))
        include_usage = (body.get("stream_options") or {}).get("include_usage")
        if include_usage and model != "mock-nousage":
            usage_chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created,
                           "model": model, "choices": [], "usage": _usage(body, len(words))}
            await write_split(b"data: " + json.dumps(usage_chunk).encode() + b"\n\n")
        await write_split(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"path": request.path, "body": body, "traceparent": request.headers.get("traceparent")})
        status = _suffix_number(str(body.get("model", "")), "mock-error-")
        if status:
            return web.json_response({"error": {"message": "bad input", "type": "BadRequestError",
                                                "code": int(status)}}, status=int(status))
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": fake_embedding(str(text))}
                for i, text in enumerate(inputs)]
        tokens = sum(len(str(text).split()) for text in inputs)
        return web.json_response({"object": "list", "data": data, "model": body.get("model"),
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def rerank(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"path": request.path, "body": body})
        results = [{"index": i, "relevance_score": fake_relevance(body["query"], doc)}
                   for i, doc in enumerate(body["documents"])]
        if body.get("model") == "mock-logits":  # some servers answer raw cross-encoder logits
            results = [{**r, "relevance_score": r["relevance_score"] * 10 - 5} for r in results]
        results.sort(key=lambda r: -r["relevance_score"])
        tokens = len(body["query"].split()) + sum(len(d.split()) for d in body["documents"])
        return web.json_response({"results": results[:body.get("top_n") or len(results)],
                                  "usage": {"total_tokens": tokens}})

    async def speech(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"path": request.path, "body": body})
        return web.Response(body=b"FAKEAUDIO:" + str(body.get("input")).encode(), content_type="audio/flac")

    async def transcriptions(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form["file"]
        fields = {k: str(v) for k, v in form.items() if k != "file"}
        self.requests.append({"path": request.path, "body": {**fields, "file_bytes": len(upload.file.read())},
                              "filename": upload.filename, "traceparent": request.headers.get("traceparent")})
        if fields.get("response_format") in PLAIN_TRANSCRIPTS:
            written = EDGE_TRANSCRIPTS if fields.get("model") == "mock-edges" else PLAIN_TRANSCRIPTS
            return web.Response(body=written[fields["response_format"]], content_type="text/plain")
        return web.json_response({"text": "fake transcript", "language": "en", "duration": 1.5,
                                  "segments": [{"id": 0, "start": 0.0, "end": 1.5, "text": " fake transcript"}]})

    async def images(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"path": request.path, "body": body})
        width, height = (int(v) for v in body["size"].split("x"))
        png = base64.b64encode(tiny_png(width, height)).decode()
        return web.json_response({"created": int(time.time()), "data": [{"b64_json": png}] * body.get("n", 1)})

    async def voices(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "alloy"}, {"id": "echo", "language": "en"}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"path": request.path, "body": body})
        count = count_prompt_tokens(body)
        return web.json_response({"count": count, "max_model_len": MAX_MODEL_LEN, "tokens": list(range(count))})

    async def recorded(self, request: web.Request) -> web.Response:
        return web.json_response(self.requests)

    async def recorded_aborts(self, request: web.Request) -> web.Response:
        return web.json_response(self.aborts)

    async def chats_in_flight(self, request: web.Request) -> web.Response:
        return web.json_response({"now": self.in_flight, "peak": self.peak_in_flight,
                                  "received": self.chats_received})

    async def reset(self, request: web.Request) -> web.Response:
        self.requests.clear()
        self.aborts.clear()
        self.peak_in_flight = self.in_flight
        return web.json_response({"ok": True})


@web.middleware
async def _check_bearer(request: web.Request, handler: Any) -> web.StreamResponse:
    """401 / 403 for the bearers that stand for a wrong upstream `api_key`, before any route runs."""
    bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
    for prefix, status in (("rejected-", 401), ("forbidden-", 403)):
        if bearer.startswith(prefix):
            return web.json_response({"error": {"message": f"Incorrect API key provided: {bearer}",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}},
                                     status=status)
    response: web.StreamResponse = await handler(request)
    return response


def build_app() -> web.Application:
    """The fake upstream as an aiohttp application."""
    fake = FakeUpstream()
    app = web.Application(middlewares=[_check_bearer])
    app.router.add_post("/v1/chat/completions", fake.chat)
    app.router.add_post("/tokenize", fake.tokenize)
    app.router.add_post("/v1/embeddings", fake.embeddings)
    app.router.add_post("/v1/rerank", fake.rerank)
    app.router.add_post("/v1/audio/speech", fake.speech)
    app.router.add_get("/v1/audio/voices", fake.voices)
    app.router.add_post("/v1/audio/transcriptions", fake.transcriptions)
    app.router.add_post("/v1/images/generations", fake.images)
    app.router.add_get("/health", lambda request: web.json_response({"ok": True}))
    app.router.add_get("/_requests", fake.recorded)
    app.router.add_get("/_aborts", fake.recorded_aborts)
    app.router.add_get("/_in_flight", fake.chats_in_flight)
    app.router.add_post("/_reset", fake.reset)
    return app


async def _serve(host: str, port: int) -> None:
    runner = web.AppRunner(build_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"ready {bound}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args()
    import uvloop
    uvloop.run(_serve(args.host, args.port))


if __name__ == "__main__":
    main()

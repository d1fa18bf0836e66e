"""The SSE relay of the streaming chat routes: one loop for every dialect (chat completions,
Messages, Responses), each dialect's bytes made by its encoder.

The relay watches for the client leaving, answers an error before the first frame as a plain
error response (the route's envelope), then sends the frames as they come and the body's end
with the last of them, in one write. A failure after the start ends the stream with the dialect's
error event. When the client leaves, the frames are closed: that aborts the upstream and bills
what was produced (status 499).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Callable, Protocol

from inferd.api.asgi import SSE_HEADERS, DisconnectWatch, Receive, Send, response_start
from inferd.auth.key_record import KeyRecord
from inferd.catalogue import ModelCatalogue
from inferd.services.chat_call import DONE_FRAME, ChatCall

log = logging.getLogger("inferd.api.sse_relay")


class SseEncoder(Protocol):
    """A dialect's side of the relay: what it sends for the items a stream yields."""

    dialect: str  # its name, for the log of a stream that broke

    # Each item's bytes after the first (a batch of chunks' JSON: the dialect's events); None when
    # the items are the SSE frames themselves (chat completions, `ChatService.stream`), sent as they
    # are: no call per frame.
    feed_all: Callable[[Any], bytes] | None

    # Work awaited once the items ended, before the last bytes leave; None: none, and no await.
    settle: Callable[[], Any] | None

    def opening(self, first: Any) -> bytes:
        """The first item's bytes, the dialect's opening events first (with `feed_all` only)."""

    def finish(self) -> bytes:
        """The last bytes of a stream whose items ran out (they end with no `[DONE]` frame)."""

    def fail(self, message: str) -> bytes:
        """The dialect's error event, for a stream that broke after it started."""


async def relay_sse(items: AsyncIterator[Any], encoder: SseEncoder, receive: Receive, send: Send) -> None:
    """Send a stream's `items` as SSE, translated by `encoder`.

    An InferdError before the first item propagates (nothing was sent: the route answers it). The
    stream ends with a frame that ends with `data: [DONE]` or with the items running out, then
    the encoder's `finish`; what ends it goes out with the end of the body, in one write."""
    task = asyncio.current_task()
    assert task is not None
    watcher = DisconnectWatch(receive, task)
    ran_out = False  # whether the items ended on their own (nothing left to close)
    try:
        first = await items.__anext__()
        await send(response_start(200, SSE_HEADERS))
        feed = encoder.feed_all
        try:
            try:
                body = first if feed is None else encoder.opening(first)
                # One loop for every dialect; for chat completions a frame costs what it did with
                # a loop of its own: the frame is sent as it came (one test of `feed`).
                while not body.endswith(DONE_FRAME):
                    if body:  # a batch of chunks may make no event
                        await send({"type": "http.response.body", "body": body, "more_body": True})
                    item = await items.__anext__()
                    body = item if feed is None else feed(item)
            except StopAsyncIteration:
                ran_out = True
                body = encoder.finish()
                if encoder.settle is not None:
                    await encoder.settle()
        except Exception:  # e.g. the usage row could not be committed: no [DONE] then
            log.exception("%s stream failed", encoder.dialect)
            body = encoder.fail("Internal server error")
        watcher.cancel()
        # The end of the body goes with the last frame: one write, not two.
        await send({"type": "http.response.body", "body": body, "more_body": False})
    except asyncio.CancelledError:
        if not watcher.fired:
            raise
        task.uncancel()  # the client disconnected: the request ends here, not as cancelled
    finally:
        watcher.cancel()
        if not ran_out:
            # Past `[DONE]` this frees the deployment's slot now; after a disconnect (or a send
            # that failed) it aborts the upstream and bills what was produced.
            await items.aclose()  # type: ignore[attr-defined]


def cache_hits_counted(catalogue: ModelCatalogue, call: ChatCall, key: KeyRecord) -> Callable[[str], bool]:
    """Whether the model that answered (the one asked, or a fallback) reports prefix-cache hits:
    a translated stream's usage counts cache hits only from such a model, as its usage rows do."""
    def counts(model_id: str) -> bool:
        for model in (call.model, *catalogue.fallbacks(call.model, key)):
            if model.id == model_id:
                return model.config.prefix_cache
        return call.model.config.prefix_cache
    return counts

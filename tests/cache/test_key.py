"""The response cache's key (decision: only what can change the output is in it), as properties over
generated requests: reordering fields, or changing `user`, `metadata`, `stream` or `stream_options`,
keeps the key; changing any field that can change the output, or the scope, changes it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.cache.control import parse_cache_control
from inferd.cache.key import cache_key, chat_form, deterministic

text = st.text(min_size=1, max_size=20)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                           "content": text}), min_size=1, max_size=4)
tools = st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.from_regex(r"[a-z]{1,8}", fullmatch=True),
     "parameters": st.just({"type": "object"})})}), min_size=1, max_size=2)
OUTPUT_FIELDS: dict[str, Any] = {
    "temperature": st.floats(0, 2, allow_nan=False), "top_p": st.floats(0.01, 0.99, allow_nan=False),
    "max_tokens": st.integers(1, 4096), "stop": st.lists(text, min_size=1, max_size=4), "seed": st.integers(0, 2**31),
    "tools": tools, "tool_choice": st.sampled_from(["none", "required", {"type": "function",
                                                                          "function": {"name": "f"}}]),
    "response_format": st.sampled_from([{"type": "json_object"}, {"type": "text"}]),
    "reasoning_effort": st.sampled_from(["low", "medium", "high"]),
    "presence_penalty": st.floats(0.1, 2, allow_nan=False), "frequency_penalty": st.floats(0.1, 2, allow_nan=False),
    "logit_bias": st.dictionaries(st.from_regex(r"[0-9]{1,4}", fullmatch=True), st.integers(-100, 100), min_size=1),
}
bodies = st.builds(lambda base, extra: {**base, **extra},
                   st.fixed_dictionaries({"model": st.sampled_from(["fast", "qwen-alias"]), "messages": messages}),
                   st.fixed_dictionaries({}, optional=OUTPUT_FIELDS))


def key(body: dict[str, Any], scope: str = "key:k1", model_id: str = "fast") -> str:
    return cache_key(scope, model_id, "chat", chat_form(body))


@settings(max_examples=150, deadline=None)
@given(bodies, st.randoms(use_true_random=False), st.dictionaries(st.sampled_from(
    ["user", "metadata", "stream", "stream_options"]), st.one_of(text, st.booleans(), st.just({"a": "b"})), max_size=4))
def test_order_and_framing_fields_keep_the_key(body: dict[str, Any], random: Any, framing: dict[str, Any]) -> None:
    items = list(body.items())
    random.shuffle(items)
    assert key(dict(items)) == key(body)
    assert key({**body, **framing}) == key(body)
    # The model as the client named it does not matter: the caller passes the canonical id.
    assert key({**body, "model": "another-alias"}) == key(body)


@settings(max_examples=150, deadline=None)
@given(bodies, st.data())
def test_every_output_field_changes_the_key(body: dict[str, Any], data: Any) -> None:
    name = data.draw(st.sampled_from(sorted(OUTPUT_FIELDS)))
    value = data.draw(OUTPUT_FIELDS[name].filter(lambda v: v != body.get(name)))
    assert key({**body, name: value}) != key(body), name


@settings(max_examples=100, deadline=None)
@given(bodies, text)
def test_messages_scope_and_model_change_the_key(body: dict[str, Any], extra: str) -> None:
    changed = [*body["messages"][:-1], {**body["messages"][-1], "content": body["messages"][-1]["content"] + extra}]
    assert key({**body, "messages": changed}) != key(body)
    assert key({**body, "messages": [*body["messages"], {"role": "user", "content": extra}]}) != key(body)
    assert key(body, scope="key:k2") != key(body) and key(body, scope="org:1") != key(body)
    assert key(body, model_id="other") != key(body)
    assert cache_key("key:k1", "fast", "embeddings", chat_form(body)) != key(body)


def test_dialect_forms_of_one_conversation_agree() -> None:
    """Translation writes text as a list of parts and fills in defaults; the form is one."""
    chat = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0}
    translated = {"model": "fast", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                  "max_completion_tokens": 5, "temperature": 0, "top_p": 1.0, "stream": True,
                  "stream_options": {"include_usage": True}, "tool_choice": None}
    assert key(translated) == key(chat)
    with_image = {**chat, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:x"}}]}]}
    assert key(with_image) != key(chat)


def test_only_determined_requests_are_deterministic() -> None:
    assert deterministic({"temperature": 0}) and deterministic({"temperature": 0.0}) and deterministic({"seed": 7})
    assert not deterministic({}) and not deterministic({"temperature": 0.7})
    assert not deterministic({"temperature": False}) and not deterministic({"seed": True})


def test_cache_control_directives() -> None:
    assert parse_cache_control(None) == parse_cache_control("") == parse_cache_control("public")
    assert (parse_cache_control("no-cache").read, parse_cache_control("no-cache").store) == (False, True)
    assert (parse_cache_control("No-Store").read, parse_cache_control("no-store").store) == (False, False)
    assert parse_cache_control("max-age=30").max_age == 30
    assert parse_cache_control("max-age=60, max-age=20").max_age == 20
    assert parse_cache_control("max-age=abc").max_age is None
    assert parse_cache_control('max-age="5", no-cache') == parse_cache_control("no-cache, max-age=5")

"""The served /openapi.json and the hot routes' hand-written checks agree, value by value.

The cases come from the document, not from a list written here: at every place of a request body
the document describes (each property, each array item, each map value, recursively, through every
branch of a oneOf/anyOf), the values tried are one of each JSON type, every enum/const value and one
outside them, and both sides of every bound the document states (minLength/maxLength, minimum,
minItems/maxItems, maxProperties, propertyNames), plus leaving the property out. The document
itself (a JSON Schema validator over the served schema) says whether a body is allowed:

- a body it allows passes the checks the route runs (called directly, as the route calls them);
- a body it forbids is refused by them, and by the running server, with a 400 whose `param` names
  the place (the place itself, a field below it, or the array/object holding it; for an enum value
  that needs another field, e.g. role `tool` without `tool_call_id`, that field of the same object).

So a bound or enum added to the checks and not to the schema (or the other way round) fails here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import httpx
import jsonschema_rs
import pytest

from inferd.errors import InvalidRequest
from inferd.protocol.chat import check_chat, check_count_tokens
from inferd.protocol.checks import check_metadata
from tests.harness import Server

MISSING: Any = object()  # the property left out
LONG, MANY = 5000, 100  # a string's length, an array's items or a map's pairs past any bound of the checks
Body = dict[str, Any]


def chat_checks(body: Body) -> None:
    """What POST /v1/chat/completions runs on a parsed body before anything else (api/chat.py)."""
    check_chat(body)
    check_metadata(body.get("metadata"))


# route -> the checks it runs on the body, or None: only the server is asked, and only about `model`.
ROUTES: dict[str, Callable[[Body], None] | None] = {
    "/v1/chat/completions": chat_checks,
    "/v1/chat/count_tokens": check_count_tokens,
    "/v1/embeddings": None,
    "/v1/rerank": None,
}


class Document:
    """The served OpenAPI document: its schemas resolved, and a validator for any of them."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.components = document["components"]
        self.paths = document["paths"]

    def request_schema(self, route: str) -> dict[str, Any]:
        return self.paths[route]["post"]["requestBody"]["content"]["application/json"]["schema"]

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.components["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def branches(self, schema: dict[str, Any]) -> list[dict[str, Any]]:
        """The alternatives a schema allows (anyOf/oneOf flattened), each resolved."""
        schema = self.resolve(schema)
        alternatives = schema.get("anyOf") or schema.get("oneOf")
        if not alternatives:
            return [schema]
        return [branch for alternative in alternatives for branch in self.branches(alternative)]

    def allows(self, schema: dict[str, Any], value: Any) -> bool:
        return bool(jsonschema_rs.Draft202012Validator({**schema, "components": self.components}).is_valid(value))

    def example(self, schema: dict[str, Any]) -> Any:
        """The smallest value the schema allows: required properties only, minimal arrays."""
        for branch in self.branches(schema):
            value = self._example(branch)
            if self.allows(branch, value):
                return value
        raise AssertionError(f"no example for {schema}")

    def _example(self, schema: dict[str, Any]) -> Any:
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][0]
        kind = schema.get("type")
        if kind == "string":
            return "a" * max(1, schema.get("minLength", 1))
        if kind in ("integer", "number"):
            return max(1, schema.get("minimum", 1))
        if kind == "boolean":
            return True
        if kind == "array":
            return [self.example(schema["items"])] * schema.get("minItems", 0)
        if kind == "object":
            properties = schema.get("properties", {})
            return {name: self.example(properties[name]) for name in schema.get("required", [])}
        return None

    def probes(self, schema: dict[str, Any]) -> list[Any]:
        """Values worth trying at a place: every JSON type; the edges a bound of the checks would sit
        on, stated in the document or not (empty, long, many, zero, negative); every enum value and
        one outside them; both sides of every bound the document states."""
        values: list[Any] = ["a", 7, 1.5, True, None, [], {}, "", "a" * LONG, 0, -1, 10**9]
        for branch in self.branches(schema):
            items, entry = branch.get("items"), branch.get("additionalProperties")
            value = self.example(entry) if isinstance(entry, dict) else "a"
            if branch.get("type") == "array" and items is not None:
                values.append([self.example(items)] * MANY)
            if isinstance(entry, dict):
                values += [{f"k{i}": value for i in range(MANY)}, {"k" * LONG: value}]
            for value in [*branch.get("enum", []), *([branch["const"]] if "const" in branch else [])]:
                values += [value, f"{value}-other" if isinstance(value, str) else value + 1]
            if "maxLength" in branch:
                values += ["a" * branch["maxLength"], "a" * (branch["maxLength"] + 1)]
            if "minLength" in branch:
                values += ["a" * branch["minLength"], "a" * max(0, branch["minLength"] - 1)]
            for bound, step in (("minimum", -1), ("maximum", 1)):
                if bound in branch:  # FastAPI writes an integer's bound as 1.0: the checks refuse a float
                    limit = int(branch[bound]) if branch.get("type") == "integer" else branch[bound]
                    values += [limit, limit + step]
            for bound, step in (("minItems", -1), ("maxItems", 1)):
                if bound in branch:
                    values += [[self.example(items)] * n for n in (branch[bound], max(0, branch[bound] + step))]
            if "maxProperties" in branch:
                values += [{f"k{i}": value for i in range(n)}
                           for n in (branch["maxProperties"], branch["maxProperties"] + 1)]
            if "maxLength" in branch.get("propertyNames", {}):
                longest = branch["propertyNames"]["maxLength"]
                values += [{"k" * longest: value}, {"k" * (longest + 1): value}]
            if branch.get("type") in ("object", "array"):
                values.append(self.example(branch))
        unique: list[Any] = []
        for value in values:
            if not any(value == seen and type(value) is type(seen) for seen in unique):
                unique.append(value)
        return unique


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def cases(doc: Document, schema: dict[str, Any], base: Any, put: Callable[[Any], Body], path: str,
          enum: tuple[Any, ...] = ()) -> Iterator[tuple[str, Body, tuple[Any, ...]]]:
    """(place, whole body, the place's enum values) for every probe at this place and below it.
    `put(value)` is the whole body with `value` at this place (MISSING: left out)."""
    for value in doc.probes(schema):
        yield path, put(value), enum
    for branch in doc.branches(schema):
        if branch.get("type") == "object":
            here = base if isinstance(base, dict) and doc.allows(branch, base) else doc.example(branch)
            for name, field in branch.get("properties", {}).items():
                def put_field(value: Any, name: str = name, here: dict[str, Any] = here) -> Body:
                    return put({k: v for k, v in here.items() if k != name} if value is MISSING
                               else {**here, name: value})
                yield _join(path, name), put_field(MISSING), ()
                values = tuple(v for b in doc.branches(field) for v in [*b.get("enum", []), *[b.get("const")]]
                               if v is not None)
                yield from cases(doc, field, here.get(name, doc.example(field)), put_field, _join(path, name),
                                 values)
            if isinstance(branch.get("additionalProperties"), dict):
                entry = branch["additionalProperties"]
                yield from cases(doc, entry, doc.example(entry), lambda value: put({"k": value}), _join(path, "k"))
        elif branch.get("type") == "array" and "items" in branch:
            items = branch["items"]
            first = base[0] if isinstance(base, list) and base and doc.allows(items, base[0]) else doc.example(items)
            rest = base[1:] if isinstance(base, list) else []
            yield from cases(doc, items, first, lambda value: put([value, *rest]), f"{path}[0]")


def _parent(path: str) -> str:
    return re.sub(r"(\.[^.\[]+|\[\d+\])$", "", path)


def names(param: str | None, path: str, value_in_enum: bool) -> bool:
    """Whether a refusal's `param` names the place a case changed."""
    if param is None:
        return False
    if param == path or param.startswith((path + ".", path + "[")) or param == _parent(path):
        return True
    parent = _parent(path)  # an enum value that needs another field of the same object
    return value_in_enum and (param.startswith(parent + ".") if parent else True)


def value_at(body: Body, path: str) -> Any:
    value: Any = body
    for step in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if not isinstance(value, (dict, list)):
            return MISSING
        value = value[int(step[1:-1])] if step.startswith("[") else value.get(step, MISSING)
        if value is MISSING:
            return MISSING
    return value


@pytest.fixture(scope="module")
def document(server: Server) -> Document:
    response = httpx.get(server.base_url + "/openapi.json", timeout=10)
    assert response.status_code == 200
    return Document(response.json())


@dataclass(frozen=True)
class Case:
    path: str  # the place changed
    body: Body
    allowed: bool  # by the document
    enum_value: bool  # the value at the place is one of the place's enum values


def all_cases(doc: Document, route: str) -> list[Case]:
    """Every case of one route's request body (only `model`'s for a route whose checks are not here)."""
    schema = doc.request_schema(route)
    found: list[Case] = []
    for path, body, enum in cases(doc, schema, doc.example(schema), lambda value: value, ""):
        if path == "" or (ROUTES[route] is None and path != "model"):
            continue  # the body itself: a non-object is refused before any field is looked at
        value = value_at(body, path)
        in_enum = value is not MISSING and any(value == v and type(value) is type(v) for v in enum)
        found.append(Case(path, body, doc.allows(schema, body), in_enum))
    return found


@pytest.mark.parametrize("route", [r for r, checks in ROUTES.items() if checks is not None])
def test_the_checks_allow_what_the_document_allows_and_refuse_the_rest(document: Document, route: str) -> None:
    checks = ROUTES[route]
    assert checks is not None
    found = all_cases(document, route)
    assert sum(c.allowed for c in found) > 20 and sum(not c.allowed for c in found) > 20
    wrong: list[str] = []
    for case in found:
        try:
            checks(case.body)
        except InvalidRequest as exc:
            if case.allowed:
                wrong.append(f"{case.path}: the document allows {case.body!r:.300} but the checks refuse it: "
                             f"{exc.message}")
            elif not names(exc.param, case.path, case.enum_value):
                wrong.append(f"{case.path}: refused with param {exc.param!r} ({exc.message}), not naming the place")
        else:
            if not case.allowed:
                wrong.append(f"{case.path}: the document forbids {case.body!r:.300} but the checks let it pass")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_server_refuses_what_the_document_forbids(server: Server, app_key: str, document: Document,
                                                      route: str) -> None:
    found = [case for case in all_cases(document, route) if not case.allowed]
    assert found
    wrong: list[str] = []
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {app_key}"}, timeout=30) as client:
        for case in found:
            response = client.post(route, json=case.body)
            error = response.json().get("error", {}) if response.status_code == 400 else {}
            if error.get("type") != "invalid_request_error" or not names(error.get("param"), case.path,
                                                                          case.enum_value):
                wrong.append(f"{case.path}: {case.body!r:.200} -> {response.status_code} {response.text:.200}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("route", [r for r, checks in ROUTES.items() if checks is None])
def test_the_server_takes_a_model_name_the_document_allows(server: Server, app_key: str, document: Document,
                                                           route: str) -> None:
    """Only `model` is asked about here: a name the document allows is not refused as a bad field
    (an unknown one is 404)."""
    allowed = [case for case in all_cases(document, route) if case.allowed]
    assert allowed
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {app_key}"}, timeout=30) as client:
        for case in allowed:
            response = client.post(route, json=case.body)
            assert not (response.status_code == 400 and response.json()["error"].get("param") == "model"), \
                (case.body, response.text)

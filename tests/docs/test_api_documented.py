"""docs/api.md and the served /openapi.json (what /docs and /redoc show) describe the same API.

- Every route in docs/api.md's route tables is an operation of the document, with a summary and a
  description, and every operation of the document is in those tables (the pages served without a
  key, /docs, /metrics, the console, are outside the document by design).
- Every error code an operation's responses name (each `code` in backticks in a 4xx/5xx response's
  description) is in docs/api.md's error table with the same status (for Anthropic's dialect: its
  error types, with their statuses, as docs/api.md lists them).
- A bad field is 400 everywhere (docs/api.md: `POST /v1/auth/exchange` is the one 422 route).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.harness import Server

ROOT = Path(__file__).resolve().parents[2]
API_MD = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
NOT_IN_DOCUMENT = "Without a key:"  # the table of the pages served beside the API (docs, metrics, console)
CODE = re.compile(r"`([A-Za-z_]+)`")


def section(title: str) -> str:
    """The text of docs/api.md's `## title` section."""
    start = API_MD.index(f"\n## {title}\n")
    end = API_MD.find("\n## ", start + 1)
    return API_MD[start:end if end != -1 else None]


def routes_in(text: str) -> set[tuple[str, str]]:
    """(METHOD, path with `{}` for each parameter) of every route in the first column of the tables
    in `text`: "`GET`, `POST /v1/admin/keys`; `GET`/`DELETE /v1/responses/{id}`" names four."""
    found: set[tuple[str, str]] = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        pending: list[str] = []
        for token in re.findall(r"`([^`]+)`", line.split("|")[1]):
            words = token.split()
            methods = [m for m in words[0].split("/") if m in METHODS]
            if not methods:
                continue
            pending += methods
            if len(words) > 1:
                path = re.sub(r"\{[^}]*\}", "{}", words[1])
                found.update((method, path) for method in pending)
                pending = []
    return found


def documented_routes() -> set[tuple[str, str]]:
    routes = section("Routes")
    return routes_in(routes[:routes.index(NOT_IN_DOCUMENT)])


def page_routes() -> set[tuple[str, str]]:
    routes = section("Routes")
    return routes_in(routes[routes.index(NOT_IN_DOCUMENT):])


def error_table() -> dict[str, set[str]]:
    """Status -> the codes docs/api.md's error table gives it."""
    table: dict[str, set[str]] = {}
    for line in section("Errors").splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 4 and cells[0].isdigit():
            table.setdefault(cells[0], set()).update(CODE.findall(cells[2]))
    return table


@pytest.fixture(scope="module")
def operations(server: Server) -> dict[tuple[str, str], dict]:
    document = httpx.get(server.base_url + "/openapi.json", timeout=10).json()
    return {(method.upper(), re.sub(r"\{[^}]*\}", "{}", path)): {**operation, "path": path}
            for path, methods in document["paths"].items() for method, operation in methods.items()}


def test_the_tables_are_read() -> None:
    assert len(documented_routes()) > 40 and ("POST", "/v1/chat/completions") in documented_routes()
    assert ("GET", "/v1/responses/{}") in documented_routes() and ("DELETE", "/v1/admin/keys/{}") in documented_routes()
    assert ("GET", "/docs") in page_routes()
    assert "context_length_exceeded" in error_table()["400"] and "timeout" in error_table()["504"]


def test_every_route_of_the_page_is_in_the_document_and_back(operations: dict[tuple[str, str], dict]) -> None:
    documented = documented_routes()
    assert not documented - set(operations), "in docs/api.md, not in /openapi.json"
    assert not set(operations) - documented, "in /openapi.json, not in docs/api.md's route tables"
    assert not page_routes() & set(operations), "the pages beside the API are not API operations"


def test_every_operation_says_what_it_does(operations: dict[tuple[str, str], dict]) -> None:
    bare = [f"{method} {path}" for (method, path), operation in operations.items()
            if not operation.get("summary") or not operation.get("description")]
    assert not bare, f"operations without a summary or a description: {bare}"


def test_every_bound_of_the_route_tables_is_in_the_document(server: Server) -> None:
    """A number a route's row states (`at most 1000 documents`, `limit` 1 to 100) is in the document
    of that row's operations: their descriptions or their schemas, $refs followed."""
    document = httpx.get(server.base_url + "/openapi.json", timeout=10).json()
    schemas = document["components"]["schemas"]

    def text_of(part: object, seen: set[str]) -> str:
        text = json.dumps(part)
        for name in set(re.findall(r"#/components/schemas/([\w-]+)", text)) - seen:
            seen.add(name)
            text += text_of(schemas[name], seen)
        return text

    operations = {(method.upper(), re.sub(r"\{[^}]*\}", "{}", path)): operation
                  for path, methods in document["paths"].items() for method, operation in methods.items()}
    routes = section("Routes")
    missing: list[str] = []
    for line in routes[:routes.index(NOT_IN_DOCUMENT)].splitlines():
        numbers = set(re.findall(r"\b\d+\b", line.split("|")[2])) if line.startswith("| `") else set()
        if numbers:
            text = "".join(text_of(operations[route], set()) for route in routes_in(line))
            missing += [f"{line.split('|')[1].strip()}: {n}" for n in sorted(numbers)
                        if not re.search(rf"\b{n}\b", text)]
    assert not missing, f"numbers docs/api.md gives a route and /openapi.json does not: {missing}"


def test_every_error_code_named_is_in_the_error_table(operations: dict[tuple[str, str], dict]) -> None:
    table = error_table()
    errors = " ".join(section("Errors").split())
    anthropic = errors[errors.index("**Anthropic's Messages API**"):]
    wrong: list[str] = []
    for (method, _), operation in operations.items():
        path = operation["path"]
        for status, response in operation["responses"].items():
            if not status[0] in "45":
                continue
            for code in CODE.findall(response.get("description", "")):
                if path.startswith("/v1/messages"):
                    ok = re.search(rf"(\b{status}|other 5xx) `{code}`", anthropic) is not None
                else:
                    ok = code in table.get(status, set())
                if not ok:
                    wrong.append(f"{method} {path} {status}: `{code}`")
    assert not wrong, "error codes /openapi.json names and docs/api.md's error table does not give that " \
                      f"status: {wrong}"


def test_a_bad_field_is_400_but_on_the_exchange(operations: dict[tuple[str, str], dict]) -> None:
    assert "422" in operations[("POST", "/v1/auth/exchange")]["responses"]
    answers_422 = [f"{method} {operation['path']}" for (method, path), operation in operations.items()
                   if "422" in operation["responses"] and path != "/v1/auth/exchange"]
    assert not answers_422
    takes_body = [operation for (_, path), operation in operations.items()
                  if "requestBody" in operation and path != "/v1/auth/exchange"]
    assert takes_body and all("400" in operation["responses"] for operation in takes_body)

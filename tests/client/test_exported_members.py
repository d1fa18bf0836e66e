"""The public names of inferd_client are pinned: adding or removing one is a decision, not an accident."""

from __future__ import annotations

import ast
import subprocess
import sys
from typing import Any

import inferd_client

EXPECTED = {
    "AdminKey", "AdminKeyList", "AuditEntry", "AuditPage", "CreatedKey", "DeploymentHealth", "DeploymentList",
    "OrgSettings", "Team", "TeamDeleted", "TeamList",
    "BudgetState", "Me", "WindowState",
    "APIConnectionError", "APIError", "APIObject", "APITimeoutError", "AsyncClient", "AsyncStream",
    "AuthenticationError", "BadRequestError", "Batch", "BatchPage", "BudgetExceededError", "ChatChoice",
    "ChatCompletion", "ChatCompletionChunk", "ChatMessage", "ChunkChoice", "ChunkDelta", "Client",
    "ClientValidationError", "Conversation", "ConversationList", "ConversationListItem", "ConversationMessage",
    "DeleteResult", "Embedding", "EmbeddingList", "ExchangeResult", "FileDeleted", "FileObject", "GenerateChunk",
    "GenerateEvent", "GenerateStart", "ImageData", "ImagesResponse", "InferdClientError", "InternalServerError",
    "LIVE_BATCH_STATUSES", "MethodNotAllowedError", "Model", "ModelList", "NOT_GIVEN", "NotFoundError", "NotGiven",
    "Pagination", "Participant", "PayloadTooLargeError", "PermissionDeniedError", "RateLimitError",
    "RequestCounts", "RerankResponse", "RerankResult", "RetryPolicy", "SSEDecoder", "ServerSentEvent", "Source",
    "SourceList", "Stream", "StreamError", "TERMINAL_BATCH_STATUSES", "TokenCount", "Transcription",
    "UnprocessableEntityError", "Usage", "UsagePage", "UsageRow", "UsageSummary", "UsageSummaryRow",
    "VectorizeResult", "VoiceList", "WaitTimeout", "__version__",
}


def test_exported_members() -> None:
    assert set(inferd_client.__all__) == EXPECTED
    assert len(inferd_client.__all__) == len(EXPECTED)
    for name in inferd_client.__all__:
        member = getattr(inferd_client, name)
        if hasattr(member, "__module__") and isinstance(member, type):
            # public classes live in private modules and are re-exported from the package root
            assert member.__module__.startswith("inferd_client._"), name


def test_public_names_are_the_only_unprefixed_ones() -> None:
    public = {n for n in dir(inferd_client) if not n.startswith("_")}
    assert public <= EXPECTED


def test_imports_without_the_server_package() -> None:
    # A fresh interpreter where `inferd` cannot be imported at all: the client must not need it.
    code = ("import sys; sys.modules['inferd'] = None; import inferd_client; "
            "assert not any(m == 'inferd' or m.startswith('inferd.') for m in sys.modules if sys.modules[m]); "
            "print('ok', inferd_client.Client.__name__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok Client"


def test_only_httpx_beyond_the_standard_library() -> None:
    code = ("import sys; before = set(sys.modules); import inferd_client; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "third = {m for m in new if m not in sys.stdlib_module_names and not m.startswith('_')}; "
            "print(sorted(third))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    third_party = set(ast.literal_eval(result.stdout))
    assert "inferd_client" in third_party and "inferd" not in third_party
    # httpx and what httpx itself imports (httpcore, anyio, certifi, idna, h11, sniffio, ...)
    httpx_deps = subprocess.run([sys.executable, "-c", "import sys; b=set(sys.modules); import httpx; "
                                 "print(sorted({m.split('.')[0] for m in set(sys.modules)-b}))"],
                                capture_output=True, text=True, timeout=60)
    assert third_party - {"inferd_client"} <= set(ast.literal_eval(httpx_deps.stdout))


def public_methods(cls: type) -> dict[str, Any]:
    """The public methods of `cls`, its base classes' included (the admin methods live in one)."""
    return {n: m for klass in reversed(cls.__mro__) if klass is not object
            for n, m in vars(klass).items() if callable(m) and not n.startswith("_")}


def test_async_client_mirrors_client() -> None:
    # The two clients are written side by side; this keeps them from drifting apart.
    import inspect

    sync_methods = public_methods(inferd_client.Client)
    async_methods = public_methods(inferd_client.AsyncClient)
    assert set(sync_methods) == set(async_methods)
    # the governance methods are on both
    assert {"me", "rotate_key", "list_teams", "create_team", "get_team", "update_team", "delete_team"} <= \
        set(sync_methods)
    for name, method in sync_methods.items():
        ours, theirs = inspect.signature(method), inspect.signature(async_methods[name])
        assert list(ours.parameters) == list(theirs.parameters), name
        assert [p.default for p in ours.parameters.values() if p.name != "sleep"] == \
            [p.default for p in theirs.parameters.values() if p.name != "sleep"], name
        is_async = inspect.iscoroutinefunction(async_methods[name])
        assert is_async == (name not in ("list_batches", "with_api_key")), name

"""Dependencies of the FastAPI (cold) routes: the services and the calling key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from fastapi import Request

from inferd.api.body_limits import preauthenticated
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import require_admin, require_long_lived, require_user_key

if TYPE_CHECKING:
    from inferd.wiring import Services


def services(request: Request) -> "Services":
    """The services `create_app()` built."""
    return request.app.state.services  # type: ignore[no-any-return]


async def caller_key(request: Request) -> KeyRecord:
    """The key behind `Authorization`: checked already, before the body, by the body limits."""
    key = preauthenticated(request.scope)
    if key is None:
        key = await services(request).auth.authenticate(request.headers.get("authorization"))
    return key


async def _admitted(request: Request, require: Callable[[KeyRecord], None], metered: bool) -> KeyRecord:
    """The caller's key, of a type `require` lets through, past the rate limits (and, `metered`, the budget)."""
    svc = services(request)
    key = await caller_key(request)
    require(key)
    await svc.limits.admit(key, metered=metered)
    return key


async def long_lived_key(request: Request) -> KeyRecord:
    """An application or admin key, rate limited, on a route that is never metered (no 402)."""
    return await _admitted(request, require_long_lived, metered=False)


async def metered_key(request: Request) -> KeyRecord:
    """An application or admin key on a metered route: rate limit, then the monthly budget."""
    return await _admitted(request, require_long_lived, metered=True)


async def user_key(request: Request) -> KeyRecord:
    """A live user-scoped key (403 `user_key_required` otherwise), rate limited, never 402."""
    return await _admitted(request, require_user_key, metered=False)


async def metered_user_key(request: Request) -> KeyRecord:
    """A user-scoped key on a metered user route (generate): rate limit, then the parent's budget.
    Vectorize is not one (the spec lists no 402 for it): its embedding
    is charged to the parent key but never refused for the budget."""
    return await _admitted(request, require_user_key, metered=True)


async def admin_key(request: Request) -> KeyRecord:
    """An admin key (403 `admin_key_required` for any other type), rate limited, never 402."""
    svc = services(request)
    key = await caller_key(request)
    require_admin(key)
    await svc.limits.admit(key, metered=False)
    return key

"""What the pool knows about each deployment at run time; the routing orders deployments by it."""

from __future__ import annotations

from dataclasses import dataclass, field

REASONS = ("connect", "timeout", "status_5xx", "status_429")


@dataclass
class DeploymentState:
    """What the pool knows about one deployment: calls in flight, its cooldown, failures by reason."""

    name: str
    weight: float
    max_in_flight: int | None
    in_flight: int = 0
    cooldown_until: float = 0.0  # monotonic seconds; healthy when in the past
    streak: int = 0  # failures in a row: each doubles the next cooldown
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    attempts: int = 0

    def has_room(self) -> bool:
        """Whether one more call may start on it."""
        return self.max_in_flight is None or self.in_flight < self.max_in_flight

"""The order in which a call tries a model's healthy deployments:

- `least-busy`: fewest calls in flight per unit of weight first;
- `round-robin`: smooth weighted round-robin (each deployment's share of picks is its weight, and
  picks of one deployment are spread out rather than bunched), then least-busy;
- `affinity`: rendezvous hashing of the affinity key (a user, a session, a conversation) over the
  deployments' names, so a key keeps its deployment while it is healthy and only the keys of a
  deployment that goes down move; without a key, least-busy.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

from inferd.calls.deployment_state import DeploymentState


def least_busy(states: Sequence[DeploymentState], healthy: list[int], turn: list[float]) -> list[int]:
    """By calls in flight per unit of weight; ties go to the one picked least recently."""
    return sorted(healthy, key=lambda i: (states[i].in_flight / states[i].weight, states[i].attempts))


def round_robin(states: Sequence[DeploymentState], healthy: list[int], turn: list[float]) -> list[int]:
    """The next deployment in weighted turn first (nginx's smooth weighted round-robin), then least-busy."""
    if not healthy:
        return []
    total = sum(states[i].weight for i in healthy)
    for i in healthy:
        turn[i] += states[i].weight
    chosen = max(healthy, key=lambda i: turn[i])
    turn[chosen] -= total
    return [chosen, *least_busy(states, [i for i in healthy if i != chosen], turn)]


def _rendezvous(key: str, name: str, weight: float) -> float:
    """Weighted rendezvous score: the deployment with the highest score owns the key."""
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    unit = (int.from_bytes(digest, "big") + 1) / (2 ** 64 + 2)  # in (0, 1)
    return -weight / math.log(unit)


def affinity(states: Sequence[DeploymentState], healthy: list[int], key: str) -> list[int]:
    """Healthy deployments by rendezvous score for `key`, highest first."""
    return sorted(healthy, key=lambda i: -_rendezvous(key, states[i].name, states[i].weight))


def order(routing: str, states: Sequence[DeploymentState], healthy: list[int], key: str | None,
          turn: list[float]) -> list[int]:
    """The healthy deployments in the order the model's routing tries them."""
    if len(healthy) <= 1:
        return healthy
    if routing == "round-robin":
        return round_robin(states, healthy, turn)
    if routing == "affinity" and key:
        return affinity(states, healthy, key)
    return least_busy(states, healthy, turn)

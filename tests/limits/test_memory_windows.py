"""The in-memory rate windows stay bounded: a window whose newest hit has left it is dropped by a
sweep that runs once enough new windows were opened (never on a hit of a window already held), and
what a live window counts is never lost to it."""

from __future__ import annotations

import asyncio

from pathlib import Path

from inferd.limits.memory import MemoryRateLimiter
from inferd.limits.worker_window import WorkerRateLimiter

WINDOW = 0.2


def test_windows_of_keys_never_seen_again_are_dropped() -> None:
    async def go() -> None:
        limiter = MemoryRateLimiter(window=WINDOW, sweep_after=64)
        sizes = []
        for round_ in range(10):
            for n in range(100):
                assert await limiter.hit(f"key-{round_}-{n}", limit=5) is None
            sizes.append(len(limiter))
            await asyncio.sleep(WINDOW * 1.5)  # every window of this round goes idle
        # 1000 keys seen, each once: the map holds about two rounds' worth at most, not all of them.
        assert max(sizes) <= 300, sizes
        assert await limiter.hit("late-newcomer", limit=5) is None

    asyncio.run(go())


def test_a_sweep_keeps_live_windows_and_their_counts() -> None:
    async def go() -> None:
        limiter = MemoryRateLimiter(window=5.0, sweep_after=8)
        assert await limiter.hit("busy", limit=2) is None
        assert await limiter.hit("busy", limit=2) is None
        for n in range(50):  # several sweeps run meanwhile
            await limiter.hit(f"other-{n}", limit=2)
        assert len(limiter) == 51  # nothing idle yet: every window is kept
        wait = await limiter.hit("busy", limit=2)
        assert wait is not None and 1 <= wait <= 5  # still counted: the third is refused

    asyncio.run(go())


def test_hits_on_held_windows_never_sweep() -> None:
    """Only opening a window counts toward a sweep: a key already held costs no extra work."""
    async def go() -> None:
        limiter = MemoryRateLimiter(window=WINDOW, sweep_after=4)
        for n in range(3):
            await limiter.hit(f"idle-{n}", limit=100)
        await asyncio.sleep(WINDOW * 1.5)
        for _ in range(50):
            await limiter.hit("idle-0", limit=100)
        assert len(limiter) == 3  # the idle ones wait for the next sweep
        await limiter.hit("fourth-new-window", limit=100)  # the 4th opened: the sweep runs
        assert len(limiter) == 2  # idle-0 (hit just now) and the newcomer

    asyncio.run(go())


def test_the_workers_file_drops_windows_of_keys_never_seen_again(tmp_path: Path) -> None:
    """`serve --workers N` without Redis: the shared file's rows of idle windows go at the periodic
    sweep, while a live window keeps its count."""
    async def go() -> None:
        limiter = WorkerRateLimiter(tmp_path / "window.db", window=WINDOW, sweep_every=50)
        try:
            assert await limiter.hit("busy", limit=2) is None
            for n in range(40):
                assert await limiter.hit(f"once-{n}", limit=5) is None
            assert len(limiter) == 41
            await asyncio.sleep(WINDOW * 1.5)  # every window goes idle
            assert await limiter.hit("busy", limit=2) is None
            for n in range(8):  # the 50th admission sweeps every idle row
                await limiter.hit(f"late-{n}", limit=5)
            assert len(limiter) == 9  # busy's one live hit and the eight late ones
            assert await limiter.hit("busy", limit=2) is None
            assert await limiter.hit("busy", limit=2) is not None  # busy still counts its hits
        finally:
            await limiter.close()

    asyncio.run(go())

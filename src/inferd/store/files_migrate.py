"""Moving files kept in a data directory (`files/<id>.jsonl`) into the configured backend: the
upgrade of a deployment that shared one data directory to one whose processes share only the
stores (`inferd files migrate`).

One file at a time: copy its bytes into the backend under its id, then point its row at them (only
if the row still names the local file), then delete the local copy. Interrupted anywhere, a rerun
carries on: a file whose row moved is never read again, a file copied but not yet pointed at is
copied again (the backend replaces it), and a local copy left behind by an interruption after its
row moved is deleted by the sweep at the end. Run it on each machine whose data directory holds
files; the servers may keep running, since a file is readable from one place or the other at
every moment.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.blobs import FILES_FOLDER
from inferd.store.files import FileStore
from inferd.store.tables import files

PAGE = 200


@dataclass
class MigrationReport:
    """What a run did."""

    moved: int = 0
    moved_bytes: int = 0
    missing: list[str] = field(default_factory=list)  # rows naming a local file this directory lacks
    removed: int = 0  # local copies deleted (their rows name the backend)


def _copy(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)


async def migrate_files(engine: AsyncEngine, store: FileStore, keep_local: bool = False) -> MigrationReport:
    """Move every local file of `store`'s data directory into its backend; `keep_local` leaves the
    local copies in place (the rows point at the backend either way)."""
    if store.blobs is store.local:
        raise ValueError("the configured file backend is the data directory itself: nothing to move to")
    report = MigrationReport()
    after = ""
    while True:
        async with engine.connect() as conn:
            rows = (await conn.execute(
                select(files.c.id, files.c.path).where(files.c.path.like(FILES_FOLDER + "/%"), files.c.id > after)
                .order_by(files.c.id).limit(PAGE))).all()
        if not rows:
            break
        for file_id, path in rows:
            after = file_id
            local = store.local.path(path)
            if not local.is_file():
                report.missing.append(file_id)  # another machine's, or lost: its row is left as it is
                continue
            spool = store.temp_path()
            await asyncio.to_thread(_copy, local, spool)
            locator = await store.publish(spool, file_id)
            async with engine.begin() as conn:
                moved = (await conn.execute(update(files).where(files.c.id == file_id, files.c.path == path)
                                            .values(path=locator))).rowcount
            if moved:
                report.moved += 1
                report.moved_bytes += local.stat().st_size
        if not keep_local:
            report.removed += await _sweep(engine, store, [file_id for file_id, _ in rows])
    if not keep_local:
        report.removed += await _sweep(engine, store, None)
    return report


async def _sweep(engine: AsyncEngine, store: FileStore, ids: list[str] | None) -> int:
    """Delete the local copies of files (`ids`, or every `<id>.jsonl` of the folder) whose rows no
    longer name them. A file with no row at all is left alone: it may be an upload in progress."""
    if ids is None:
        ids = [entry.stem for entry in store.folder.glob("*.jsonl")]
    removed = 0
    for start in range(0, len(ids), PAGE):
        chunk = ids[start:start + PAGE]
        async with engine.connect() as conn:
            moved = {file_id for file_id, path in (await conn.execute(
                select(files.c.id, files.c.path).where(files.c.id.in_(chunk)))).all()
                if not path.startswith(FILES_FOLDER + "/")}
        for file_id in moved:
            local = store.folder / f"{file_id}.jsonl"
            if local.exists():
                await asyncio.to_thread(local.unlink, True)
                removed += 1
    return removed

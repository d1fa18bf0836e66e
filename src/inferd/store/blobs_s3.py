"""File bytes in an S3-compatible bucket (`[storage] backend = "s3"`): AWS S3, MinIO, Ceph...

boto3 is a blocking client, so every call runs in a thread and the event loop never waits on the
network. Uploads go through boto3's transfer manager, which switches to a multipart upload past
8 MiB (parts of 8 MiB, two at a time: a bounded amount of memory per upload); downloads read the
object's body 1 MiB at a time. Credentials and the region come from the standard AWS environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION or
AWS_DEFAULT_REGION, an instance or pod role), read by boto3 itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator

from inferd.config_storage import StorageConfig
from inferd.store.blobs import CHUNK_BYTES

PREFIX = "s3://"
PART_BYTES = 8 << 20
_MISSING = ("NoSuchKey", "404", "NotFound")


def _split(locator: str) -> tuple[str, str]:
    bucket, _, key = locator.removeprefix(PREFIX).partition("/")
    return bucket, key


class BucketBlobs:
    """Bytes as objects `<prefix><file id>.jsonl` of one bucket."""

    def __init__(self, config: StorageConfig) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        assert config.bucket is not None
        self.bucket = config.bucket
        self.prefix = config.prefix
        # Path-style addressing for an endpoint of its own (MinIO and most S3-compatible servers
        # serve buckets under the path, not as subdomains); AWS's own default otherwise.
        addressing = {"s3": {"addressing_style": "path"}} if config.endpoint_url else {}
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=config.endpoint_url, region_name=config.region,
            config=Config(retries={"max_attempts": 5, "mode": "standard"}, **addressing))
        self._transfer = TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES,
                                        max_concurrency=2)

    def owns(self, locator: str) -> bool:
        return locator.startswith(PREFIX)

    async def put(self, file_id: str, source: Path) -> str:
        key = f"{self.prefix}{file_id}.jsonl"
        await asyncio.to_thread(self._client.upload_file, str(source), self.bucket, key,
                                ExtraArgs={"ContentType": "application/jsonl"}, Config=self._transfer)
        await asyncio.to_thread(source.unlink, True)
        return f"{PREFIX}{self.bucket}/{key}"

    async def chunks(self, locator: str) -> AsyncIterator[bytes]:
        from botocore.exceptions import ClientError

        bucket, key = _split(locator)
        try:
            answer = await asyncio.to_thread(self._client.get_object, Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return
            raise
        body = answer["Body"]
        try:
            piece = await asyncio.to_thread(body.read, CHUNK_BYTES)
            yield piece  # the first, even when empty: the object exists
            while piece:
                piece = await asyncio.to_thread(body.read, CHUNK_BYTES)
                if piece:
                    yield piece
        finally:
            body.close()

    async def remove(self, locator: str) -> None:
        bucket, key = _split(locator)
        await asyncio.to_thread(self._client.delete_object, Bucket=bucket, Key=key)  # none: no error

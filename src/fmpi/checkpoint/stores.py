"""Where checkpoints live: a folder, an S3 prefix or a Redis database, behind one small key-value interface.

Keys are relative paths (``manifest.json``, ``step-000000000012/rank-3``).
``get`` returns a writable buffer: arrays restored from it are views into it
that the program may update in place, as it did the arrays it saved.
Each ``put`` is atomic for a reader: a folder writes a temporary file and
renames it; an S3 PUT and a Redis SET are atomic by themselves. That is what
lets a rank killed mid-write leave no half part under a real key.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from ..util import usage


class Store(Protocol):
    url: str

    def put(self, key: str, parts: Iterable[bytes | memoryview]) -> None: ...
    def get(self, key: str) -> bytearray | None: ...
    def keys(self, prefix: str = "") -> list[str]: ...
    def delete(self, keys: list[str]) -> None: ...


class FolderStore:
    def __init__(self, url: str, root: str) -> None:
        self.url, self.root = url, Path(root)

    def put(self, key: str, parts: Iterable[bytes | memoryview]) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as f:
                for part in parts:
                    f.write(part)
                f.flush()
                os.fsync(f.fileno())  # (on disk before the name says it is complete)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytearray | None:
        try:
            with open(self.root / key, "rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)
                f.readinto(data)
                return data
        except FileNotFoundError:
            return None

    def keys(self, prefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        found = (p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())
        return sorted(k for k in found if k.startswith(prefix) and not Path(k).name.startswith(".part-"))

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            (self.root / key).unlink(missing_ok=True)
            try:
                (self.root / key).parent.rmdir()  # (the step's folder, once its last part is gone)
            except OSError:
                pass


class S3Store:
    def __init__(self, url: str, bucket: str, prefix: str) -> None:
        import boto3
        from botocore.config import Config

        self.url, self.bucket, self.prefix = url, bucket, prefix.strip("/") + "/" if prefix.strip("/") else ""
        # (botocore's adaptive retry mode: a burst of ranks writing at once is throttled, not failed)
        self._s3 = boto3.client("s3", config=Config(retries={"mode": "adaptive", "max_attempts": 8}))

    def put(self, key: str, parts: Iterable[bytes | memoryview]) -> None:
        usage.count("s3", "PUT")
        self._s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=b"".join(parts))

    def get(self, key: str) -> bytearray | None:
        usage.count("s3", "GET")
        try:
            return bytearray(self._s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read())
        except self._s3.exceptions.NoSuchKey:
            return None

    def keys(self, prefix: str = "") -> list[str]:
        found: list[str] = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            usage.count("s3", "LIST")
            found += [item["Key"][len(self.prefix):] for item in page.get("Contents", [])]
        return sorted(found)

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # (DeleteObjects takes at most 1,000 keys)
            chunk = [{"Key": self.prefix + k} for k in keys[start:start + 1000]]
            usage.count("s3", "DELETE")
            self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})


class RedisStore:
    def __init__(self, url: str) -> None:
        import redis

        parsed = urlparse(url)
        self.url = url
        self.prefix = "fmpi-checkpoint:" + parsed.fragment + ":" if parsed.fragment else "fmpi-checkpoint:"
        self._redis = redis.Redis.from_url(url.split("#", 1)[0], socket_timeout=30, socket_connect_timeout=10)

    def put(self, key: str, parts: Iterable[bytes | memoryview]) -> None:
        usage.count("redis", "SET")
        self._redis.set(self.prefix + key, b"".join(parts))

    def get(self, key: str) -> bytearray | None:
        usage.count("redis", "GET")
        value = self._redis.get(self.prefix + key)
        return None if value is None else bytearray(value)

    def keys(self, prefix: str = "") -> list[str]:
        found: list[str] = []
        cursor = None
        while cursor != 0:  # (SCAN by hand, not scan_iter: each call is a request to count)
            usage.count("redis", "SCAN")
            cursor, batch = self._redis.scan(cursor or 0, match=self.prefix + prefix + "*")
            found += [k.decode()[len(self.prefix):] for k in batch]
        return sorted(set(found))  # (SCAN may return a key twice)

    def delete(self, keys: list[str]) -> None:
        if keys:
            usage.count("redis", "DEL")
            self._redis.delete(*(self.prefix + k for k in keys))


def open_store(url: str) -> Store:
    """``file:///abs/folder`` (or a plain path), ``s3://bucket/prefix``, ``redis://host:port/db#name``."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return FolderStore(url, parsed.path if parsed.scheme else url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"FMPI_CHECKPOINT_URL {url!r}: an S3 URL names a bucket: s3://BUCKET/PREFIX")
        return S3Store(url, parsed.netloc, parsed.path)
    if parsed.scheme in ("redis", "rediss"):
        return RedisStore(url)
    raise ValueError(f"FMPI_CHECKPOINT_URL {url!r}: use file:///folder, s3://bucket/prefix or redis://host:port")

"""S3 for `triage fleet`: list an `s3://bucket/prefix` page by page into jobs (the same units as `triage watch`:
a sub-prefix is one job, top-level objects sharing a Slurm job id are one) and read an object as a Source.

boto3 with the usual AWS credential chain (environment, profile, instance or pod role); the endpoint comes from
`--s3-endpoint` or AWS_ENDPOINT_URL (an S3-compatible store, a local test server). Nothing here logs a
credential: only bucket, key and endpoint are ever named."""
from __future__ import annotations

import errno
import functools
import io
import json
import os
from typing import Iterator

from core.ingest import ReadError, Source

PAGE = 1000   # keys per list call (S3's own maximum)


def split_uri(uri: str) -> tuple[str, str]:
    """'s3://bucket/some/prefix' → ('bucket', 'some/prefix/'); the prefix always ends with '/' unless empty."""
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{uri}: not an s3://bucket/prefix address")
    return bucket, (prefix.rstrip("/") + "/") if prefix.strip("/") else ""


def client(endpoint: str | None = None):
    """One S3 client per process and endpoint (boto3 clients are thread-safe, never pickled, and never shared with
    a forked worker: its connections are the parent's). Retries and timeouts bound a stalled read: a job that hangs
    on S3 fails instead of holding its worker."""
    return _client(endpoint, os.getpid())


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, pid: int):
    import boto3
    from botocore.config import Config
    cfg = Config(connect_timeout=10, read_timeout=60, retries={"max_attempts": 5, "mode": "standard"})
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None, config=cfg)


def _pages(bucket: str, prefix: str, endpoint: str | None, delimiter: str | None) -> Iterator[dict]:
    kwargs = {"Bucket": bucket, "Prefix": prefix, "PaginationConfig": {"PageSize": PAGE}}
    if delimiter:
        kwargs["Delimiter"] = delimiter
    yield from client(endpoint).get_paginator("list_objects_v2").paginate(**kwargs)


def _uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


class Listing:
    """The jobs under one s3://bucket/prefix, lazily: a sub-prefix's objects are listed when its turn comes. `meta`
    keeps each listed object's (size, ETag, last modified epoch) for the job's signature."""

    def __init__(self, uri: str, endpoint: str | None = None) -> None:
        self.bucket, self.prefix = split_uri(uri)
        self.endpoint = endpoint
        self.meta: dict[str, tuple[int, str, float]] = {}

    def entries(self) -> Iterator[tuple[str, str, str]]:
        """(kind, name, location) of what lies directly under the prefix, page by page (watch.group_jobs' input)."""
        for page in _pages(self.bucket, self.prefix, self.endpoint, "/"):
            for p in page.get("CommonPrefixes", []):
                name = p["Prefix"][len(self.prefix):].rstrip("/")
                yield "dir", name, p["Prefix"]
            for obj in page.get("Contents", []):
                name = obj["Key"][len(self.prefix):]
                if name:
                    self._keep(obj)
                    yield "file", name, _uri(self.bucket, obj["Key"])

    def files_of(self, prefix: str) -> list[tuple[str, str]]:
        """A sub-prefix's log objects as (s3://…, name inside it), the rules of core.inputs.log_paths for a folder:
        by suffix, hidden parts skipped, sorted, at most MAX_DIR_FILES."""
        from core.inputs import LOG_SUFFIXES, MAX_DIR_FILES
        out = []
        for page in _pages(self.bucket, prefix, self.endpoint, None):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix):]
                if rel.endswith("/") or any(part.startswith(".") for part in rel.split("/")):
                    continue
                if rel.lower().endswith(LOG_SUFFIXES):
                    self._keep(obj)
                    out.append((_uri(self.bucket, obj["Key"]), rel))
        return sorted(out, key=lambda x: x[1])[:MAX_DIR_FILES]

    def _keep(self, obj: dict) -> None:
        self.meta[_uri(self.bucket, obj["Key"])] = (int(obj.get("Size", 0)), str(obj.get("ETag", "")),
                                                    obj["LastModified"].timestamp())

    def signature(self, files: list[tuple[str, str]]) -> tuple[str, float] | None:
        """(what the objects look like now, the newest last-modified time), as watch.signature for files."""
        try:
            seen = [(name, *self.meta[loc]) for loc, name in files]
        except KeyError:
            return None
        return json.dumps([(n, size, etag) for n, size, etag, _ in seen]), max(t for *_, t in seen)


class _Body(io.RawIOBase):
    """A GetObject body as a raw stream, so io.BufferedReader can peek at it (archive and gzip detection)."""

    def __init__(self, body) -> None:
        self.body = body

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        from botocore.exceptions import BotoCoreError
        from urllib3.exceptions import HTTPError
        try:
            data = self.body.read(len(b))
        except (BotoCoreError, HTTPError) as e:   # a stalled or cut read: an I/O error to core.ingest (EIO)
            raise OSError(errno.EIO, type(e).__name__) from None
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self.body.close()
        super().close()


def open_object(uri: str, max_bytes: int, name: str, endpoint: str | None = None) -> Source:
    """An object as a Source (read as it streams in). An object S3 refuses (missing, archived to Glacier, access
    denied) is a ReadError naming S3's error code."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, _, key = uri[len("s3://"):].partition("/")
    try:
        body = client(endpoint).get_object(Bucket=bucket, Key=key)["Body"]
    except ClientError as e:
        raise ReadError(f"{name}: cannot read ({e.response.get('Error', {}).get('Code', 'error')})") from None
    except BotoCoreError as e:
        raise ReadError(f"{name}: cannot read ({type(e).__name__})") from None
    return Source(name, io.BufferedReader(_Body(body), 1 << 20), max_bytes)

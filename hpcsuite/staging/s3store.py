"""The ``s3`` backend: objects behind the job's RADOS gateway, through boto3 (path-style addressing).

Keys in the bucket: ``data/<name>`` (the bytes, uploaded in 8 MiB multipart parts as they are
streamed) and ``meta/<name>`` (JSON size, checksum and its algorithm, written after the data: the
commit record; records of the first form, with ``sha256`` only, are still read). Timeouts and a
small retry count make a dead gateway an error within ``timeout`` seconds. Batches
(:meth:`S3Store.put_many`, :meth:`S3Store.iter_many`) keep ``inflight`` requests in flight from a
pool of threads (boto3 clients are thread-safe).
"""
from __future__ import annotations

import io
import json
from collections.abc import Mapping

from hpcsuite.runtime import optional

from .store import StagingError, Store, Writer, check_name, info_from_record, record_of

__all__ = ["S3Store"]

PART = 8 << 20        # multipart part size (S3's minimum is 5 MiB)
INFLIGHT = 8          # requests in flight in a batch


def _err(what, exc) -> StagingError:
    return StagingError(f"s3: {what}: {exc}")


class _S3Writer(Writer):
    def __init__(self, store: "S3Store", name: str, algorithm: str):
        super().__init__(name, algorithm)
        self.store = store
        self.key = f"data/{name}"
        self.buf = bytearray()
        self.upload_id = None
        self.parts = []

    def _send_part(self, data: bytes):
        s3, b = self.store.s3, self.store.bucket
        try:
            if self.upload_id is None:
                self.upload_id = s3.create_multipart_upload(Bucket=b, Key=self.key)["UploadId"]
            n = len(self.parts) + 1
            r = s3.upload_part(Bucket=b, Key=self.key, PartNumber=n, UploadId=self.upload_id, Body=data)
            self.parts.append({"PartNumber": n, "ETag": r["ETag"]})
        except Exception as exc:  # noqa: BLE001 - botocore errors
            raise _err(f"writing {self.name!r}", exc) from None

    def _write(self, mv):
        self.buf += mv
        while len(self.buf) >= 2 * PART:       # keep >= PART for the last part (S3 minimum)
            self._send_part(bytes(self.buf[:PART]))
            del self.buf[:PART]

    def _commit(self, info):
        s3, b = self.store.s3, self.store.bucket
        try:
            if self.upload_id is None:
                s3.put_object(Bucket=b, Key=self.key, Body=bytes(self.buf))
            else:
                if self.buf:
                    self._send_part(bytes(self.buf))
                s3.complete_multipart_upload(Bucket=b, Key=self.key, UploadId=self.upload_id,
                                             MultipartUpload={"Parts": self.parts})
            self.buf = bytearray()
            s3.put_object(Bucket=b, Key=f"meta/{self.name}",
                          Body=json.dumps(record_of(info)).encode())
        except StagingError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _err(f"committing {self.name!r}", exc) from None

    def _abort(self):
        if self.upload_id is not None:
            try:
                self.store.s3.abort_multipart_upload(Bucket=self.store.bucket, Key=self.key,
                                                     UploadId=self.upload_id)
            except Exception:  # noqa: BLE001 - best effort
                pass


class _Body(io.RawIOBase):
    def __init__(self, body):
        self.body = body

    def readable(self):
        return True

    def readinto(self, b):
        data = self.body.read(len(b))
        n = len(data)
        memoryview(b).cast("B")[:n] = data
        return n

    def close(self):
        self.body.close()
        super().close()


class S3Store(Store):
    """Objects in ``bucket`` of an S3 endpoint (the deployment's RADOS gateway). Local.

    Parameters
    ----------
    endpoint, access_key, secret_key : str
        From the deployment's ``s3.json`` (written 0600 by ``stage up --backend s3``).
    bucket : str
        Created if missing.
    timeout : float
        Connect and read timeout in seconds.
    checksum : str, optional
        Checksum algorithm of new objects (default: the fastest available).
    """

    backend = "s3"

    def __init__(self, endpoint: str, access_key: str, secret_key: str, bucket: str = "hpcsuite",
                 timeout: float = 15.0, checksum: str | None = None):
        self.checksum = self._algorithm(checksum)
        boto3 = optional.require("boto3", "the s3 staging backend")     # InputError naming the extra
        from botocore.config import Config
        self.s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                               aws_secret_access_key=secret_key, region_name="us-east-1",
                               config=Config(s3={"addressing_style": "path"}, connect_timeout=timeout,
                                             read_timeout=timeout, retries={"max_attempts": 2},
                                             max_pool_connections=2 * INFLIGHT,
                                             request_checksum_calculation="when_required",
                                             response_checksum_validation="when_required"))
        self.bucket = bucket
        try:
            self.s3.head_bucket(Bucket=bucket)
        except Exception:  # noqa: BLE001 - absent bucket or unreachable endpoint
            try:
                self.s3.create_bucket(Bucket=bucket)
            except Exception as exc:  # noqa: BLE001
                raise _err(f"cannot reach or create bucket {bucket!r} at {endpoint}", exc) from None

    def _writer(self, name, algorithm):
        return _S3Writer(self, name, algorithm)

    def _batch(self, fn, args):
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=min(INFLIGHT, max(1, len(args)))) as pool:
            return list(pool.map(fn, args))          # (the first error is raised, after the rest)

    def put_many(self, items, checksum=None):
        """Store many objects, ``INFLIGHT`` requests in flight. Local."""
        alg = self._algorithm(checksum)
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        for n, _ in pairs:
            check_name(n)
        return self._batch(lambda p: self.put_bytes(p[0], p[1], alg), pairs)

    def iter_many(self, names, verify=True):
        """``(name, bytes)`` of many objects, ``INFLIGHT`` requests in flight, each verified. Local."""
        from concurrent.futures import ThreadPoolExecutor
        names = [check_name(n) for n in names]
        with ThreadPoolExecutor(max_workers=INFLIGHT) as pool:
            yield from zip(names, pool.map(lambda n: self.get_bytes(n, verify), names))

    def info(self, name):
        try:
            meta = json.loads(self.s3.get_object(Bucket=self.bucket, Key=f"meta/{check_name(name)}")["Body"].read())
        except self.s3.exceptions.NoSuchKey:
            raise StagingError(f"no object {name!r} in the s3 bucket {self.bucket!r}") from None
        except Exception as exc:  # noqa: BLE001
            raise _err(f"reading the record of {name!r}", exc) from None
        return info_from_record(name, meta)

    def _open(self, info):
        try:
            return _Body(self.s3.get_object(Bucket=self.bucket, Key=f"data/{info.name}")["Body"])
        except Exception as exc:  # noqa: BLE001
            raise _err(f"reading {info.name!r}", exc) from None

    def list(self, prefix=""):
        out = []
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                          Prefix=f"meta/{prefix}"):
                out += [o["Key"][5:] for o in page.get("Contents", [])]
        except Exception as exc:  # noqa: BLE001
            raise _err("listing objects", exc) from None
        return sorted(out)

    def delete(self, name):
        check_name(name)
        try:
            self.s3.delete_object(Bucket=self.bucket, Key=f"meta/{name}")
            self.s3.delete_object(Bucket=self.bucket, Key=f"data/{name}")
        except Exception as exc:  # noqa: BLE001
            raise _err(f"deleting {name!r}", exc) from None

    def close(self):
        self.s3.close()

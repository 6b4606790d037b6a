"""Storage failures that reach the request handler become clear Statuses; the SQLite memory gauge."""

from __future__ import annotations

import grpc
import grpc.aio

from apiserver_min.server.app import storage_error_status
from apiserver_min.storage.etcd import EtcdBackend
from apiserver_min.storage.interface import StorageError, StorageFullError, UnavailableError
from apiserver_min.storage.sqlite import MEMORY_METRIC, SqliteBackend


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def test_full_storage_is_internal_error_naming_the_cause():
    err = storage_error_status(StorageFullError("sqlite: /d/state.db: database or disk is full"))
    assert err.code == 500 and err.reason == "InternalError"
    assert "storage is full" in err.message and "database or disk is full" in err.message


def test_unavailable_storage_is_503_with_retry_after():
    err = storage_error_status(UnavailableError("etcd: UNAVAILABLE: connection refused"))
    assert err.code == 503 and err.retry_after == 1
    assert storage_error_status(StorageError("odd")).code == 500


def test_etcd_space_quota_is_storage_full():
    backend = EtcdBackend(["127.0.0.1:1"], prefix="/x")
    error = backend._error(_rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "etcdserver: mvcc: database space exceeded"))
    assert isinstance(error, StorageFullError)
    error = backend._error(_rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    assert isinstance(error, UnavailableError)


async def test_sqlite_memory_gauge_counts_the_page_cache(tmp_path):
    backend = SqliteBackend(str(tmp_path / "state.db"), compaction_interval=0)
    await backend.start()
    try:
        before = _gauge(backend.render_metrics())
        for i in range(200):
            await backend.create(f"/k/{i:04d}", b"x" * 2000)  # about 100 pages of 4 KiB
        after = _gauge(backend.render_metrics())
        assert after - before > 200 * 2000 // 2, (before, after)
    finally:
        await backend.close()
    assert _gauge(backend.render_metrics()) < after  # closing frees the connection's cache


def _gauge(lines: list[str]) -> int:
    assert lines[:2] == [
        "# HELP orch_storage_sqlite_memory_bytes Bytes of memory SQLite holds in this process "
        "(page cache, schemas, prepared statements).",
        "# TYPE orch_storage_sqlite_memory_bytes gauge",
    ]
    name, value = lines[2].split()
    assert name == MEMORY_METRIC
    return int(value)

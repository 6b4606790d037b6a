"""The Service range allocators (registry/allocator.py): bitmaps in storage, the
random choice with a static lower subrange, exhaustion, and atomicity across two
allocators sharing one SQLite database."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from apiserver_min.registry.allocator import (
    ERR_FULL,
    ERR_IP_ALLOCATED,
    ERR_PORT_ALLOCATED,
    AlreadyAllocatedError,
    IPAllocator,
    NotInRangeError,
    PortAllocator,
    RangeFullError,
    decode_bitmap,
    encode_bitmap,
    pick_free,
    static_offset,
)
from apiserver_min.storage.interface import ConflictError
from apiserver_min.storage.sqlite import SqliteBackend


@pytest.fixture
async def backend(tmp_path):
    b = SqliteBackend(str(tmp_path / "state.db"), compaction_interval=0)
    await b.start()
    yield b
    await b.close()


def test_static_offset_as_upstream():
    # Cluster IPs: min(max(16, size/16), 256) of the CIDR's size; nothing for 16 or fewer.
    assert static_offset(1 << 20, 16, 256, 16) == 256
    assert static_offset(256, 16, 256, 16) == 16
    assert static_offset(16, 16, 256, 16) == 0
    assert static_offset(1 << 12, 16, 256, 16) == 256


def test_pick_free_prefers_upper_subrange_then_lower():
    size, offset = 32, 16
    seen = {pick_free(0, size, offset, lambda n, k=k: k % n) for k in range(64)}
    assert seen == set(range(16, 32))
    upper_full = sum(1 << i for i in range(16, 32))
    assert pick_free(upper_full, size, offset, lambda n: 0) == 0
    assert pick_free((1 << size) - 1, size, offset, lambda n: 0) is None


def test_bitmap_round_trip_is_compact_for_sparse_ranges():
    bits = (1 << 1_000_000) | (1 << 5) | 1
    data = encode_bitmap(bits)
    assert decode_bitmap(data) == bits and len(data) < 2000
    assert decode_bitmap(encode_bitmap(0)) == 0


async def test_ip_allocator_range_messages_and_persistence(backend):
    cidr = ipaddress.ip_network("10.96.0.0/28")  # 14 usable addresses: .1 to .14
    a = IPAllocator(backend, "/ranges/serviceips", cidr)
    assert a.size == 14 and a.first() == "10.96.0.1"
    await a.allocate("10.96.0.1")
    with pytest.raises(AlreadyAllocatedError, match=ERR_IP_ALLOCATED):
        await a.allocate("10.96.0.1")
    with pytest.raises(NotInRangeError) as e:
        await a.allocate("10.0.0.1")
    assert str(e.value) == (
        "the provided IP (10.0.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/28"
    )
    for bad in ("10.96.0.0", "10.96.0.15"):  # network and broadcast addresses
        with pytest.raises(NotInRangeError):
            await a.allocate(bad)
    got = {await a.allocate_next() for _ in range(13)}
    assert len(got) == 13 and "10.96.0.1" not in got
    with pytest.raises(RangeFullError, match=ERR_FULL):
        await a.allocate_next()
    # A second allocator over the same storage sees the same state (as after a restart).
    b = IPAllocator(backend, "/ranges/serviceips", cidr)
    with pytest.raises(RangeFullError):
        await b.allocate_next()
    await b.release("10.96.0.7")
    assert await a.allocate_next() == "10.96.0.7"


async def test_dry_run_keeps_nothing(backend):
    a = PortAllocator(backend, "/ranges/servicenodeports", 30000, 3)
    await a.allocate(30001, dry_run=True)
    assert await a.allocated_indexes() == set()
    first = await a.allocate_next(dry_run=True)
    assert 30000 <= first <= 30002 and await a.allocated_indexes() == set()


async def test_port_allocator_messages(backend):
    a = PortAllocator(backend, "/ranges/servicenodeports", 30000, 2768)
    await a.allocate(30080)
    with pytest.raises(AlreadyAllocatedError, match=ERR_PORT_ALLOCATED):
        await a.allocate(30080)
    with pytest.raises(NotInRangeError) as e:
        await a.allocate(5)
    assert str(e.value) == "provided port is not in the valid range. The range of valid ports is 30000-32767"
    # Node ports have no static subrange (as v1.27): the whole range is used.
    assert a.offset == 0
    small = PortAllocator(backend, "/ranges/small", 31000, 20)
    assert sorted([await small.allocate_next() for _ in range(20)]) == list(range(31000, 31020))
    with pytest.raises(RangeFullError, match=ERR_FULL):
        await small.allocate_next()


async def test_two_allocators_on_one_database_never_hand_out_one_value_twice(backend):
    """Two allocators (as two API servers' stores) over one database, allocating at once:
    each change is a compare-and-swap on the bitmap's revision, so a lost race retries."""
    conflicts = []
    update = backend.update

    async def counting_update(key, value, expected):
        try:
            return await update(key, value, expected)
        except ConflictError:
            conflicts.append(key)
            raise

    backend.update = counting_update
    cidr = ipaddress.ip_network("10.0.0.0/26")  # 62 addresses
    a1 = IPAllocator(backend, "/ranges/serviceips", cidr)
    a2 = IPAllocator(backend, "/ranges/serviceips", cidr)

    async def take(alloc, n):
        return [await alloc.allocate_next() for _ in range(n)]

    r1, r2 = await asyncio.gather(take(a1, 31), take(a2, 31))
    assert len(set(r1) | set(r2)) == 62
    assert conflicts, "the two allocators never raced"
    with pytest.raises(RangeFullError):
        await a1.allocate_next()

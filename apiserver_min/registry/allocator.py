"""Range allocators for Service cluster IPs and node ports, kept in the storage backend.

A range's allocations are one bitmap object (``RangeAllocation``) under its own
storage key (``/ranges/serviceips``, ``/ranges/servicenodeports``). Every change
reads the object and writes it back with a compare-and-swap on its revision, so
several API servers sharing one etcd (or two processes on one SQLite file) never
hand out one value twice, and allocations survive restarts.

Bit ``i`` stands for the ``i``-th value of the range (IPs: the network address and,
for IPv4, the broadcast address are never offered). A new value is picked at random,
for cluster IPs first in the upper part of the range; the lower part (the *static*
subrange, e.g. ``10.96.0.1`` for the ``orch`` Service) is offered only when the upper
part is full, so addresses chosen by hand there rarely collide with automatic ones (as
upstream's static subrange). Node ports are picked uniformly, as in v1.27.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import ipaddress
import random
import zlib
from typing import Callable

import orjson

from ..storage.interface import Backend, ConflictError, KeyExistsError, KeyNotFoundError

RANGES_PREFIX = "/ranges/"
SERVICE_IPS_KEY = RANGES_PREFIX + "serviceips"
SECONDARY_SERVICE_IPS_KEY = RANGES_PREFIX + "secondaryserviceips"
SERVICE_NODE_PORTS_KEY = RANGES_PREFIX + "servicenodeports"

# The error texts clients see (upstream's).
ERR_FULL = "range is full"
ERR_IP_ALLOCATED = "provided IP is already allocated"
ERR_PORT_ALLOCATED = "provided port is already allocated"

# Upper bound of an IPv6 range's bitmap (upstream keeps the same bound).
MAX_IPV6_RANGE = 65536


class AllocationError(Exception):
    """A value could not be allocated; ``str()`` is the message clients see."""


class RangeFullError(AllocationError):
    def __init__(self) -> None:
        super().__init__(ERR_FULL)


class AlreadyAllocatedError(AllocationError):
    pass


class NotInRangeError(AllocationError):
    pass


def static_offset(size: int, lo: int, hi: int, step: int) -> int:
    """The size of the static (lower) subrange: ``min(max(lo, size // step), hi)``,
    none at all for ranges of at most ``lo`` values."""
    if size <= lo:
        return 0
    return min(max(lo, size // step), hi)


def pick_free(bits: int, size: int, offset: int, rand: Callable[[int], int]) -> int | None:
    """A free index of the bitmap ``bits`` (bit i set = i taken): scan the upper
    subrange [offset, size) from a random start, wrapping; then the lower one."""
    offset = min(offset, size)
    upper = size - offset
    if upper > 0:
        start = rand(upper)
        for i in range(upper):
            at = offset + (start + i) % upper
            if not (bits >> at) & 1:
                return at
    if offset > 0:
        start = rand(offset)
        for i in range(offset):
            at = (start + i) % offset
            if not (bits >> at) & 1:
                return at
    return None


def encode_bitmap(bits: int) -> str:
    raw = bits.to_bytes((bits.bit_length() + 7) // 8, "big") if bits else b""
    return base64.b64encode(zlib.compress(raw, 1)).decode()


def decode_bitmap(data: str) -> int:
    raw = zlib.decompress(base64.b64decode(data)) if data else b""
    return int.from_bytes(raw, "big")


@dataclasses.dataclass
class Snapshot:
    """A range's bitmap as read from storage (``revision`` 0: not stored yet)."""

    range: str
    bits: int
    revision: int


class RangeStore:
    """The bitmap of one range in the storage backend, changed by compare-and-swap."""

    def __init__(self, backend: Backend, key: str, range_spec: str, size: int):
        self.backend = backend
        self.key = key
        self.range_spec = range_spec
        self.size = size
        # The bitmap as of a revision this store read or wrote: decoding is skipped
        # while storage still holds that revision.
        self._known: tuple[int, int] = (0, 0)

    async def read(self) -> Snapshot:
        kv = await self.backend.get(self.key)
        if kv is None:
            return Snapshot(self.range_spec, 0, 0)
        if kv.mod_revision == self._known[0]:
            return Snapshot(self.range_spec, self._known[1], kv.mod_revision)
        obj = orjson.loads(kv.value)
        if obj.get("range") != self.range_spec:
            # Another range was configured before: its bitmap says nothing about this
            # one (the repair loop rebuilds it from the Services).
            return Snapshot(str(obj.get("range", "")), 0, kv.mod_revision)
        bits = decode_bitmap(obj.get("data", ""))
        self._known = (kv.mod_revision, bits)
        return Snapshot(self.range_spec, bits, kv.mod_revision)

    def _encode(self, bits: int) -> bytes:
        return orjson.dumps(
            {
                "kind": "RangeAllocation",
                "apiVersion": "v1",
                "metadata": {"name": self.key[len(RANGES_PREFIX) :]},
                "range": self.range_spec,
                "data": encode_bitmap(bits),
            }
        )

    async def write(self, snap: Snapshot, bits: int) -> bool:
        """Replace the bitmap read as ``snap``; False when it changed meanwhile."""
        try:
            if snap.revision == 0:
                rev = await self.backend.create(self.key, self._encode(bits))
            else:
                rev = await self.backend.update(self.key, self._encode(bits), snap.revision)
        except (ConflictError, KeyExistsError, KeyNotFoundError):
            return False
        self._known = (rev, bits)
        return True

    async def change(self, fn: Callable[[int], int]) -> int:
        """Apply ``fn`` (old bits -> new bits, may raise) until the swap lands; returns the new bits."""
        while True:
            snap = await self.read()
            bits = fn(snap.bits)
            if bits == snap.bits and snap.revision != 0 and snap.range == self.range_spec:
                return bits
            if await self.write(snap, bits):
                return bits
            await asyncio.sleep(0)


class RangeAllocator:
    """Allocation of indexes 0..size-1 of one range; subclasses map values to indexes."""

    def __init__(self, store: RangeStore, offset: int, rand: Callable[[int], int] | None = None):
        self.store = store
        self.size = store.size
        self.offset = offset
        self._rand = rand or random.SystemRandom().randrange

    def _rand_below(self, n: int) -> int:
        return self._rand(n) if n > 0 else 0

    async def allocate_index(self, index: int, dry_run: bool = False) -> None:
        def take(bits: int) -> int:
            if (bits >> index) & 1:
                raise AlreadyAllocatedError(self.allocated_message)
            return bits | (1 << index)

        if dry_run:
            take((await self.store.read()).bits)
            return
        await self.store.change(take)

    async def allocate_next_index(self, dry_run: bool = False, also_taken: int = 0) -> int:
        """A free index, taken; ``also_taken`` marks indexes to skip (what a dry-run
        request already picked)."""
        chosen: list[int] = []

        def take(bits: int) -> int:
            at = pick_free(bits | also_taken, self.size, self.offset, self._rand_below)
            if at is None:
                raise RangeFullError()
            chosen[:] = [at]
            return bits | (1 << at)

        if dry_run:
            take((await self.store.read()).bits)
        else:
            await self.store.change(take)
        return chosen[0]

    async def release_index(self, index: int) -> None:
        await self.store.change(lambda bits: bits & ~(1 << index))

    async def allocated_indexes(self) -> set[int]:
        bits = (await self.store.read()).bits
        out, i = set(), 0
        while bits:
            if bits & 1:
                out.add(i)
            bits >>= 1
            i += 1
        return out

    allocated_message = ""


class IPAllocator(RangeAllocator):
    """Cluster IPs of one CIDR (one IP family)."""

    allocated_message = ERR_IP_ALLOCATED

    def __init__(self, backend: Backend, key: str, cidr: ipaddress.IPv4Network | ipaddress.IPv6Network, rand=None):
        self.cidr = cidr
        self.family = "IPv4" if cidr.version == 4 else "IPv6"
        total = cidr.num_addresses
        size = total - 1  # never the network address
        if cidr.version == 4:
            size -= 1  # nor the broadcast address
        else:
            size = min(size, MAX_IPV6_RANGE)
        size = max(size, 0)
        self.base = int(cidr.network_address) + 1
        super().__init__(RangeStore(backend, key, str(cidr), size), static_offset(total, 16, 256, 16), rand)

    def index_of(self, ip: str) -> int:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            raise NotInRangeError(self._not_in_range(ip)) from None
        if addr.version != self.cidr.version:
            raise NotInRangeError(self._not_in_range(ip))
        i = int(addr) - self.base
        if not 0 <= i < self.size:
            raise NotInRangeError(self._not_in_range(ip))
        return i

    def ip_at(self, index: int) -> str:
        return str(ipaddress.ip_address(self.base + index))

    def _not_in_range(self, ip: str) -> str:
        return f"the provided IP ({ip}) is not in the valid range. The range of valid IPs is {self.cidr}"

    def first(self) -> str:
        return self.ip_at(0)

    async def allocate(self, ip: str, dry_run: bool = False) -> None:
        await self.allocate_index(self.index_of(ip), dry_run)

    async def allocate_next(self, dry_run: bool = False) -> str:
        return self.ip_at(await self.allocate_next_index(dry_run))

    async def release(self, ip: str) -> None:
        try:
            i = self.index_of(ip)
        except NotInRangeError:
            return  # never allocated from this range
        await self.release_index(i)

    def contains(self, ip: str) -> bool:
        try:
            self.index_of(ip)
        except NotInRangeError:
            return False
        return True


class PortAllocator(RangeAllocator):
    """Node ports of one range (``--service-node-port-range``)."""

    allocated_message = ERR_PORT_ALLOCATED

    def __init__(self, backend: Backend, key: str, base: int, size: int, rand=None):
        self.base = base
        self.range_text = f"{base}-{base + size - 1}"
        # Node ports have no static subrange in v1.27 (its ServiceNodePortStaticSubrange
        # gate is alpha, off): every free port is equally likely.
        super().__init__(RangeStore(backend, key, self.range_text, size), 0, rand)

    def index_of(self, port: int) -> int:
        i = port - self.base
        if not 0 <= i < self.size:
            raise NotInRangeError(
                f"provided port is not in the valid range. The range of valid ports is {self.range_text}"
            )
        return i

    async def allocate(self, port: int, dry_run: bool = False) -> None:
        await self.allocate_index(self.index_of(port), dry_run)

    async def allocate_next(self, dry_run: bool = False) -> int:
        return self.base + await self.allocate_next_index(dry_run)

    async def release(self, port: int) -> None:
        try:
            i = self.index_of(port)
        except NotInRangeError:
            return
        await self.release_index(i)

    def contains(self, port: int) -> bool:
        return 0 <= port - self.base < self.size

"""The device manager's checkpoint: which devices each container holds, and what each
plugin had registered, so that an agent restart keeps every allocation.

The file has upstream's JSON shape::

    {"Data": {"PodDeviceEntries": [{"PodUID": ..., "ContainerName": ..., "ResourceName": ...,
                                    "DeviceIDs": {"<NUMA node or -1>": [ids]},
                                    "AllocResp": "<base64 of the ContainerAllocateResponse>"}],
              "RegisteredDevices": {"<resource>": [ids]}},
     "Checksum": <uint32>}

The checksum is FNV-1a (32 bit) over the canonical JSON of ``Data`` (sorted keys, no
spaces); a file whose checksum does not match is refused as corrupt. It is written to a
temporary file and renamed over the old one, so a crash leaves the old or the new file.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

from ..checkpoint import fnv32a, write_atomic

__all__ = ["Checkpoint", "CheckpointError", "PodDeviceEntry", "fnv32a", "NO_NUMA"]

NO_NUMA = -1  # the NUMA key of devices without topology information


class CheckpointError(ValueError):
    pass


@dataclass
class PodDeviceEntry:
    pod_uid: str
    container_name: str
    resource_name: str
    device_ids: dict[int, list[str]]  # NUMA node (or NO_NUMA) -> device ids
    alloc_resp: bytes = b""

    def to_json(self) -> dict:
        return {
            "PodUID": self.pod_uid,
            "ContainerName": self.container_name,
            "ResourceName": self.resource_name,
            "DeviceIDs": {str(k): list(v) for k, v in sorted(self.device_ids.items())},
            "AllocResp": base64.b64encode(self.alloc_resp).decode("ascii"),
        }

    @classmethod
    def from_json(cls, raw: object, where: str) -> "PodDeviceEntry":
        if not isinstance(raw, dict):
            raise CheckpointError(f"{where}: expected an object")
        strings = {}
        for key in ("PodUID", "ContainerName", "ResourceName"):
            value = raw.get(key)
            if not isinstance(value, str) or not value:
                raise CheckpointError(f"{where}.{key}: expected a non-empty string")
            strings[key] = value
        ids_raw = raw.get("DeviceIDs") or {}
        if not isinstance(ids_raw, dict):
            raise CheckpointError(f"{where}.DeviceIDs: expected an object of NUMA node -> device ids")
        ids: dict[int, list[str]] = {}
        for k, v in ids_raw.items():
            try:
                node = int(k)
            except ValueError:
                raise CheckpointError(f"{where}.DeviceIDs: NUMA node {k!r} is not an integer") from None
            if not isinstance(v, list) or not all(isinstance(i, str) for i in v):
                raise CheckpointError(f"{where}.DeviceIDs[{k}]: expected a list of device ids")
            ids[node] = list(v)
        resp = raw.get("AllocResp") or ""
        if not isinstance(resp, str):
            raise CheckpointError(f"{where}.AllocResp: expected base64 text")
        try:
            alloc = base64.b64decode(resp, validate=True)
        except (binascii.Error, ValueError):
            raise CheckpointError(f"{where}.AllocResp: not valid base64") from None
        return cls(strings["PodUID"], strings["ContainerName"], strings["ResourceName"], ids, alloc)


@dataclass
class Checkpoint:
    entries: list[PodDeviceEntry] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)

    def _data(self) -> dict:
        return {
            "PodDeviceEntries": [e.to_json() for e in self.entries],
            "RegisteredDevices": {k: sorted(v) for k, v in sorted(self.registered.items())},
        }

    def encode(self) -> bytes:
        data = self._data()
        checksum = fnv32a(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
        return json.dumps({"Data": data, "Checksum": checksum}, sort_keys=True).encode()

    @classmethod
    def decode(cls, blob: bytes) -> "Checkpoint":
        try:
            doc = json.loads(blob)
        except ValueError as exc:
            raise CheckpointError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("Data"), dict):
            raise CheckpointError('expected an object with "Data" and "Checksum"')
        data = doc["Data"]
        want = fnv32a(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
        if doc.get("Checksum") != want:
            raise CheckpointError("checkpoint is corrupted: the checksum does not match the data")
        raw_entries = data.get("PodDeviceEntries") or []
        if not isinstance(raw_entries, list):
            raise CheckpointError("Data.PodDeviceEntries: expected a list")
        entries = [PodDeviceEntry.from_json(e, f"Data.PodDeviceEntries[{i}]") for i, e in enumerate(raw_entries)]
        raw_reg = data.get("RegisteredDevices") or {}
        if not isinstance(raw_reg, dict) or not all(
            isinstance(v, list) and all(isinstance(i, str) for i in v) for v in raw_reg.values()
        ):
            raise CheckpointError("Data.RegisteredDevices: expected an object of resource -> device ids")
        return cls(entries, {str(k): list(v) for k, v in raw_reg.items()})

    def write(self, path: str) -> None:
        write_atomic(path, self.encode())

    @classmethod
    def read(cls, path: str) -> "Checkpoint | None":
        """The checkpoint at ``path``; None when there is none. Raises CheckpointError."""
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"cannot read {path}: {exc}") from None
        try:
            return cls.decode(blob)
        except CheckpointError as exc:
            raise CheckpointError(f"{path}: {exc}") from None

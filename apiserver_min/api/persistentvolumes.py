"""Persistent volumes and claims: which volume a claim may bind to.

Plain functions on dicts, shared by the volume binder (``controllers/persistentvolume.py``)
and the scheduler's volume binding (``scheduler/volumebinding.py``), with upstream's rules:

* a claim's class is the legacy ``volume.beta.orch.io/storage-class`` annotation when
  present, else ``spec.storageClassName`` (absent and ``""`` both mean "no class");
  a volume's likewise;
* a volume fits a claim when it is not bound to another claim, is not being deleted,
  has at least the requested ``storage``, the same ``volumeMode`` (absent means
  ``Filesystem``), the claim's class, labels the claim's ``selector`` picks, phase
  ``Available``, and every access mode the claim asks for;
* a volume pre-bound to the claim (``spec.claimRef`` naming it, with its uid or none)
  wins outright; otherwise the smallest fitting volume, looking first among the volumes
  whose access modes are the fewest (upstream's index by access-mode sets);
* without a node, a claim of a ``WaitForFirstConsumer`` class binds only to a volume
  pre-bound to it: the scheduler picks the rest once a pod using the claim has a node.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from . import names
from .helpers import dict_at
from .quantity import Quantity, QuantityError
from .selectors import LabelSelector, SelectorError, label_selector_from_dict

VOLUME_BINDING_IMMEDIATE = "Immediate"
VOLUME_BINDING_WAIT = "WaitForFirstConsumer"

# Phases.
VOLUME_PENDING, VOLUME_AVAILABLE, VOLUME_BOUND, VOLUME_RELEASED, VOLUME_FAILED = (
    "Pending",
    "Available",
    "Bound",
    "Released",
    "Failed",
)
CLAIM_PENDING, CLAIM_BOUND, CLAIM_LOST = "Pending", "Bound", "Lost"

ANNOTATION_YES = "yes"

# The fields of a PersistentVolume's spec that are not its volume source.
VOLUME_SPEC_FIELDS = frozenset(
    {
        "accessModes",
        "capacity",
        "claimRef",
        "mountOptions",
        "nodeAffinity",
        "persistentVolumeReclaimPolicy",
        "storageClassName",
        "volumeMode",
        "volumeAttributesClassName",
    }
)


def volume_sources(volume: Mapping) -> list[str]:
    """The volume source fields a PersistentVolume's spec sets (exactly one when valid)."""
    spec = dict_at(volume, "spec")
    return sorted(k for k, v in spec.items() if k not in VOLUME_SPEC_FIELDS and v is not None)


def annotations_of(obj: Mapping) -> Mapping[str, str]:
    ann = dict_at(obj, "metadata").get("annotations")
    return ann if isinstance(ann, dict) else {}


def claim_class(claim: Mapping) -> str:
    ann = annotations_of(claim)
    if names.ANNOTATION_STORAGE_CLASS_BETA in ann:
        return str(ann[names.ANNOTATION_STORAGE_CLASS_BETA])
    return str(dict_at(claim, "spec").get("storageClassName") or "")


def claim_class_unset(claim: Mapping) -> bool:
    """No class asked for at all (``storageClassName`` absent, no legacy annotation):
    the default class applies. An explicit ``""`` asks for volumes without a class."""
    return names.ANNOTATION_STORAGE_CLASS_BETA not in annotations_of(claim) and (
        dict_at(claim, "spec").get("storageClassName") is None
    )


def volume_class(volume: Mapping) -> str:
    ann = annotations_of(volume)
    if names.ANNOTATION_STORAGE_CLASS_BETA in ann:
        return str(ann[names.ANNOTATION_STORAGE_CLASS_BETA])
    return str(dict_at(volume, "spec").get("storageClassName") or "")


def storage_quantity(resources: Any) -> Quantity | None:
    """The ``storage`` amount of a resource list; None when absent or malformed."""
    if not isinstance(resources, dict) or resources.get("storage") in (None, ""):
        return None
    try:
        return Quantity.parse(str(resources["storage"]))
    except (QuantityError, ValueError):
        return None


def requested_storage(claim: Mapping) -> Quantity:
    spec = dict_at(claim, "spec")
    found = storage_quantity(dict_at(spec, "resources").get("requests"))
    return found if found is not None else Quantity.parse("0")


def volume_capacity(volume: Mapping) -> Quantity | None:
    return storage_quantity(dict_at(volume, "spec").get("capacity"))


def volume_mode(spec: Mapping) -> str:
    return str(spec.get("volumeMode") or "Filesystem")


def access_modes(obj: Mapping) -> tuple[str, ...]:
    modes = dict_at(obj, "spec").get("accessModes")
    return tuple(str(m) for m in modes) if isinstance(modes, list) else ()


def claim_ref_of(volume: Mapping) -> Mapping | None:
    ref = dict_at(volume, "spec").get("claimRef")
    return ref if isinstance(ref, dict) and ref.get("name") else None


def claim_key(claim: Mapping) -> tuple[str, str]:
    md = dict_at(claim, "metadata")
    return str(md.get("namespace") or ""), str(md.get("name") or "")


def claim_ref(claim: Mapping) -> dict:
    """A volume's ``claimRef`` naming ``claim`` (its uid and resource version too)."""
    md = dict_at(claim, "metadata")
    return {
        "kind": "PersistentVolumeClaim",
        "namespace": md.get("namespace", ""),
        "name": md.get("name", ""),
        "uid": md.get("uid", ""),
        "apiVersion": "v1",
        "resourceVersion": str(md.get("resourceVersion") or ""),
    }


def bound_to_claim(volume: Mapping, claim: Mapping) -> bool:
    """The volume's ``claimRef`` names this claim (with its uid, or no uid yet)."""
    ref = claim_ref_of(volume)
    if ref is None:
        return False
    ns, name = claim_key(claim)
    if ref.get("name") != name or (ref.get("namespace") or "") != ns:
        return False
    uid = ref.get("uid") or ""
    return not uid or uid == dict_at(claim, "metadata").get("uid")


def being_deleted(obj: Mapping) -> bool:
    return bool(dict_at(obj, "metadata").get("deletionTimestamp"))


def claim_selector(claim: Mapping) -> LabelSelector | None:
    """The claim's ``selector``; None for no selector. A malformed one selects
    nothing (validation keeps those out)."""
    raw = dict_at(claim, "spec").get("selector")
    if raw is None:
        return None
    try:
        return label_selector_from_dict(raw) if isinstance(raw, dict) else LabelSelector.nothing()
    except (SelectorError, TypeError, ValueError, AttributeError, KeyError):
        return LabelSelector.nothing()


def volume_mismatch(volume: Mapping, claim: Mapping) -> str:
    """Why a volume the claim names (``spec.volumeName``) cannot serve it ("" when it
    can): upstream's checkVolumeSatisfyClaim, in its words."""
    capacity = volume_capacity(volume)
    requested = requested_storage(claim)
    if capacity is None or capacity.as_fraction() < requested.as_fraction():
        return "requested PV is too small"
    if volume_class(volume) != claim_class(claim):
        return "storageClassName does not match"
    if volume_mode(dict_at(volume, "spec")) != volume_mode(dict_at(claim, "spec")):
        return "incompatible volumeMode"
    if not set(access_modes(claim)) <= set(access_modes(volume)):
        return "incompatible accessMode"
    return ""


def _fits(volume: Mapping, claim: Mapping, requested: Quantity, selector: LabelSelector | None) -> bool:
    capacity = volume_capacity(volume)
    if capacity is None or capacity.as_fraction() < requested.as_fraction():
        return False
    if volume_mode(dict_at(volume, "spec")) != volume_mode(dict_at(claim, "spec")):
        return False
    return not being_deleted(volume)


def find_matching_volume(
    claim: Mapping,
    volumes: Iterable[Mapping],
    *,
    delay_binding: bool = False,
    node_ok: Callable[[Mapping], bool] | None = None,
    excluded: frozenset[str] = frozenset(),
) -> Mapping | None:
    """The volume for ``claim`` among ``volumes`` (see the module text), or None.

    ``node_ok`` is the scheduler's question "does this volume's node affinity allow
    the node being tried?"; without it (the binder) node affinity is not looked at."""
    requested = requested_storage(claim)
    selector = claim_selector(claim)
    wanted_class = claim_class(claim)
    wanted_modes = set(access_modes(claim))
    # Upstream's index: only volumes offering every requested mode, grouped by their
    # set of modes, the groups with the fewest modes tried first.
    groups: dict[frozenset[str], list[Mapping]] = {}
    for volume in volumes:
        modes = frozenset(access_modes(volume))
        if wanted_modes <= modes:
            groups.setdefault(modes, []).append(volume)
    for modes in sorted(groups, key=lambda m: (len(m), sorted(m))):
        best: Mapping | None = None
        best_size = None
        for volume in groups[modes]:
            name = dict_at(volume, "metadata").get("name") or ""
            if name in excluded:
                continue
            if claim_ref_of(volume) is not None and not bound_to_claim(volume, claim):
                continue
            if not _fits(volume, claim, requested, selector):
                continue
            affinity_ok = node_ok(volume) if node_ok is not None else True
            if bound_to_claim(volume, claim):
                return volume if affinity_ok else None
            if node_ok is None and delay_binding:
                continue
            if dict_at(volume, "status").get("phase") != VOLUME_AVAILABLE:
                continue
            if selector is not None and not selector.matches(dict_at(volume, "metadata").get("labels") or {}):
                continue
            if volume_class(volume) != wanted_class or not affinity_ok:
                continue
            size = volume_capacity(volume)
            assert size is not None
            if best_size is None or size.as_fraction() < best_size:
                best, best_size = volume, size.as_fraction()
        if best is not None:
            return best
    return None


def class_binding_mode(storage_class: Mapping | None) -> str:
    if storage_class is None:
        return VOLUME_BINDING_IMMEDIATE
    return str(storage_class.get("volumeBindingMode") or VOLUME_BINDING_IMMEDIATE)


def default_storage_class(classes: Iterable[Mapping]) -> Mapping | None:
    """Upstream 1.27's default class: among the classes annotated as default, the
    newest (by creation time), then the first by name."""
    defaults = [c for c in classes if is_default_class(c)]
    if not defaults:
        return None
    defaults.sort(key=lambda c: str(dict_at(c, "metadata").get("name") or ""))
    defaults.sort(key=lambda c: str(dict_at(c, "metadata").get("creationTimestamp") or ""), reverse=True)
    return defaults[0]


def is_default_class(storage_class: Mapping) -> bool:
    ann = annotations_of(storage_class)
    return (
        ann.get(names.ANNOTATION_DEFAULT_STORAGE_CLASS) == "true"
        or ann.get(names.ANNOTATION_DEFAULT_STORAGE_CLASS_BETA) == "true"
    )


def claim_controlled_by(claim: Mapping, pod_uid: str) -> bool:
    """The claim's controller reference names the pod (an ephemeral volume's claim)."""
    for ref in dict_at(claim, "metadata").get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref.get("kind") == "Pod" and ref.get("uid") == pod_uid
    return False


def ephemeral_claim_names(pod: Mapping) -> set[str]:
    """The claims of the pod's generic ephemeral volumes (``<pod>-<volume>``)."""
    pod_name = dict_at(pod, "metadata").get("name") or ""
    return {
        f"{pod_name}-{vol.get('name') or ''}"
        for vol in dict_at(pod, "spec").get("volumes") or []
        if isinstance(vol, dict) and isinstance(vol.get("ephemeral"), dict)
    }


def pod_claim_names(pod: Mapping) -> list[str]:
    """The claims a pod's volumes use: ``persistentVolumeClaim`` volumes and generic
    ephemeral volumes (whose claim is ``<pod>-<volume>``), in volume order."""
    out = []
    pod_name = dict_at(pod, "metadata").get("name") or ""
    for vol in dict_at(pod, "spec").get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        src = vol.get("persistentVolumeClaim")
        if isinstance(src, dict) and src.get("claimName"):
            out.append(str(src["claimName"]))
        elif isinstance(vol.get("ephemeral"), dict):
            out.append(f"{pod_name}-{vol.get('name') or ''}")
    return out

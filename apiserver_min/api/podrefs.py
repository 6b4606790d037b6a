"""The objects a pod refers to (secrets, config maps, claims, its service account), by name."""

from __future__ import annotations

from typing import Any, Iterator

SECRET, CONFIGMAP, PVC, SERVICEACCOUNT = "secret", "configmap", "pvc", "serviceaccount"


def _name(d: Any, key: str = "name") -> str:
    if isinstance(d, dict):
        v = d.get(key)
        if isinstance(v, str):
            return v
    return ""


def _containers(spec: dict) -> Iterator[dict]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                yield c


# Volume sources that carry a secret reference besides ``secret`` itself.
_VOLUME_SECRET_REFS = (
    ("azureFile", "secretName"),
    ("cephfs", "secretRef"),
    ("cinder", "secretRef"),
    ("flexVolume", "secretRef"),
    ("iscsi", "secretRef"),
    ("rbd", "secretRef"),
    ("scaleIO", "secretRef"),
    ("storageos", "secretRef"),
    ("csi", "nodePublishSecretRef"),
)


def pod_references(pod: dict) -> dict[str, set[str]]:
    """Names (in the pod's namespace) of the objects a pod uses, by kind: the secrets,
    config maps, volume claims and service account a node needs to run it."""
    spec = pod.get("spec") or {}
    md = pod.get("metadata") or {}
    refs: dict[str, set[str]] = {SECRET: set(), CONFIGMAP: set(), PVC: set(), SERVICEACCOUNT: set()}
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if isinstance(sa, str) and sa:
        refs[SERVICEACCOUNT].add(sa)
    for s in spec.get("imagePullSecrets") or []:
        if _name(s):
            refs[SECRET].add(_name(s))
    for c in _containers(spec):
        for e in c.get("env") or []:
            vf = e.get("valueFrom") if isinstance(e, dict) else None
            if isinstance(vf, dict):
                if _name(vf.get("secretKeyRef")):
                    refs[SECRET].add(_name(vf["secretKeyRef"]))
                if _name(vf.get("configMapKeyRef")):
                    refs[CONFIGMAP].add(_name(vf["configMapKeyRef"]))
        for ef in c.get("envFrom") or []:
            if isinstance(ef, dict):
                if _name(ef.get("secretRef")):
                    refs[SECRET].add(_name(ef["secretRef"]))
                if _name(ef.get("configMapRef")):
                    refs[CONFIGMAP].add(_name(ef["configMapRef"]))
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        if _name(v.get("secret"), "secretName"):
            refs[SECRET].add(v["secret"]["secretName"])
        if _name(v.get("configMap")):
            refs[CONFIGMAP].add(v["configMap"]["name"])
        if _name(v.get("persistentVolumeClaim"), "claimName"):
            refs[PVC].add(v["persistentVolumeClaim"]["claimName"])
        if isinstance(v.get("ephemeral"), dict) and md.get("name") and v.get("name"):
            refs[PVC].add(f"{md['name']}-{v['name']}")  # the generated claim's name
        projected = v.get("projected")
        if isinstance(projected, dict):
            for src in projected.get("sources") or []:
                if not isinstance(src, dict):
                    continue
                if _name(src.get("secret")):
                    refs[SECRET].add(src["secret"]["name"])
                if _name(src.get("configMap")):
                    refs[CONFIGMAP].add(src["configMap"]["name"])
        for source, key in _VOLUME_SECRET_REFS:
            sv = v.get(source)
            if isinstance(sv, dict):
                ref = sv.get(key)
                n = ref if isinstance(ref, str) else _name(ref)
                if n:
                    refs[SECRET].add(n)
    return refs

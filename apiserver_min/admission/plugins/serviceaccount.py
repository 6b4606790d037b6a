"""The ServiceAccount admission plugin: pods get an account, its token volume and
its image pull secrets; mirror pods may use none of them."""

from __future__ import annotations

import asyncio
import random
from typing import Any, Callable

from ...api import names
from ...api import status as st
from ...api.helpers import list_at
from ...registry.lookup import ObjectLookup
from ...registry.strategy import generate_suffix
from ..chain import Attributes

# The projected token's lifetime upstream's admission plugin writes into pods.
PROJECTED_TOKEN_EXPIRATION_SECONDS = 3607
PROJECTED_VOLUME_DEFAULT_MODE = 0o644
# Upstream's admission plugin retries a missing "default" account this often: the
# controller creates it moments after its namespace.
DEFAULT_ACCOUNT_LOOKUPS = 10


def token_volume_source() -> dict:
    """The projected volume upstream's plugin adds: the token, the cluster CA, the namespace."""
    return {
        "defaultMode": PROJECTED_VOLUME_DEFAULT_MODE,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": PROJECTED_TOKEN_EXPIRATION_SECONDS, "path": "token"}},
            {"configMap": {"name": names.ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ],
    }


def _containers(spec: dict, key: str) -> list[dict]:
    items = spec.get(key)
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def mount_service_account_token(spec: dict, suffix: Callable[[], str]) -> None:
    """Mount the token volume read-only at the well-known path in every (init)
    container that has nothing there yet; add the volume if any container needs it."""
    volumes = list_at(spec, "volumes")
    volume_name = ""
    for v in volumes:
        if isinstance(v, dict) and str(v.get("name", "")).startswith(names.SERVICEACCOUNT_VOLUME_PREFIX):
            volume_name = v["name"]
            break
    has_volume = bool(volume_name)
    volume_name = volume_name or names.SERVICEACCOUNT_VOLUME_PREFIX + suffix()
    needs_volume = False
    for key in ("initContainers", "containers"):
        for c in _containers(spec, key):
            mounts = list_at(c, "volumeMounts")
            if any(isinstance(m, dict) and m.get("mountPath") == names.SERVICEACCOUNT_TOKEN_MOUNT_PATH for m in mounts):
                continue
            c["volumeMounts"] = mounts + [
                {"name": volume_name, "readOnly": True, "mountPath": names.SERVICEACCOUNT_TOKEN_MOUNT_PATH}
            ]
            needs_volume = True
    if needs_volume and not has_volume:
        spec["volumes"] = volumes + [{"name": volume_name, "projected": token_volume_source()}]


def should_automount(sa: dict, pod_spec: dict) -> bool:
    if isinstance(pod_spec.get("automountServiceAccountToken"), bool):
        return pod_spec["automountServiceAccountToken"]
    if isinstance(sa.get("automountServiceAccountToken"), bool):
        return sa["automountServiceAccountToken"]
    return True


def _secret_names(spec: dict) -> bool:
    """Whether a pod spec references any secret (upstream's VisitPodSecretNames)."""
    if spec.get("imagePullSecrets"):
        return True
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        if v.get("secret"):
            return True
        for src in (v.get("projected") or {}).get("sources") or []:
            if isinstance(src, dict) and src.get("secret"):
                return True
        for plugin in ("azureFile", "cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos", "csi"):
            cfg = v.get(plugin)
            if isinstance(cfg, dict) and (
                cfg.get("secretRef") or cfg.get("secretName") or cfg.get("nodePublishSecretRef")
            ):
                return True
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in _containers(spec, key):
            for e in c.get("envFrom") or []:
                if isinstance(e, dict) and e.get("secretRef"):
                    return True
            for e in c.get("env") or []:
                if isinstance(e, dict) and ((e.get("valueFrom") or {}).get("secretKeyRef")):
                    return True
    return False


class ServiceAccountAdmission:
    """Upstream's ServiceAccount plugin, for pod creation.

    Mutating: default ``spec.serviceAccountName`` to ``default``; refuse a pod whose
    account does not exist; mount the projected token volume (unless the pod or
    the account turns automounting off); copy the account's image pull secrets
    when the pod names none. Validating: mirror pods (created by node agents for
    static pods) may not use service accounts, secrets or token projections, and
    are never changed."""

    name = "ServiceAccount"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE"})
    complete = True  # the token volume it adds carries its defaults

    def __init__(self, server: Any):
        self.server = server
        self._lookup: ObjectLookup | None = None
        self.generate_suffix: Callable[[], str] | None = None

    @property
    def lookup(self) -> ObjectLookup:
        if self._lookup is None:
            self._lookup = ObjectLookup(self.server.cache, self.server.registry, self.server.store)
        return self._lookup

    @staticmethod
    def _applies(attrs: Attributes) -> dict | None:
        k = attrs.kind
        if attrs.operation != "CREATE" or attrs.subresource or k.group != "" or k.resource != "pods":
            return None
        pod = attrs.obj
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            return None
        return pod

    @staticmethod
    def _mirror(pod: dict) -> bool:
        annotations = (pod.get("metadata") or {}).get("annotations")
        return isinstance(annotations, dict) and names.ANNOTATION_CONFIG_MIRROR in annotations

    async def admit(self, attrs: Attributes) -> None:
        pod = self._applies(attrs)
        if pod is None or self._mirror(pod):
            return
        spec = pod["spec"]
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or names.DEFAULT_SERVICE_ACCOUNT
        # The deprecated spec.serviceAccount is read as a fallback but not written: upstream
        # fills it by conversion on every read, which this server does not have, and a
        # stored copy would make later updates without it look like spec changes.
        spec["serviceAccountName"] = account
        sa = await self._service_account(attrs, account)
        if should_automount(sa, spec):
            mount_service_account_token(spec, self.generate_suffix or generate_suffix)
        if not spec.get("imagePullSecrets"):
            pulls = [
                {"name": s["name"]} for s in sa.get("imagePullSecrets") or [] if isinstance(s, dict) and s.get("name")
            ]
            if pulls:
                spec["imagePullSecrets"] = pulls

    async def _service_account(self, attrs: Attributes, account: str) -> dict:
        ns = attrs.namespace
        sa = await self.lookup.get("serviceaccounts", ns, account)
        attempts = DEFAULT_ACCOUNT_LOOKUPS if account == names.DEFAULT_SERVICE_ACCOUNT else 1
        for _ in range(attempts - 1):
            if sa is not None:
                break
            await asyncio.sleep(random.uniform(0.1, 0.2))
            sa = await self.lookup.live("serviceaccounts", ns, account)
        if sa is None:
            raise st.forbidden(
                "pods",
                attrs.name,
                "",
                f'error looking up service account {ns}/{account}: serviceaccount "{account}" not found',
            )
        return sa

    async def validate(self, attrs: Attributes) -> None:
        pod = self._applies(attrs)
        if pod is None:
            return
        spec = pod["spec"]
        if self._mirror(pod):
            if spec.get("serviceAccountName") or spec.get("serviceAccount"):
                raise st.forbidden("pods", attrs.name, "", "a mirror pod may not reference service accounts")
            if _secret_names(spec):
                raise st.forbidden("pods", attrs.name, "", "a mirror pod may not reference secrets")
            for v in spec.get("volumes") or []:
                for src in ((v or {}).get("projected") or {}).get("sources") or []:
                    if isinstance(src, dict) and src.get("serviceAccountToken") is not None:
                        raise st.forbidden(
                            "pods", attrs.name, "", "a mirror pod may not use ServiceAccountToken volume projections"
                        )
            return
        if not spec.get("serviceAccountName"):
            raise st.forbidden(
                "pods", attrs.name, "", f"no service account specified for pod {attrs.namespace}/{attrs.name}"
            )

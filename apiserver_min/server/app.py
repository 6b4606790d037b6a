"""The API server process: wiring, the request path, start-up and shutdown.

Request path: authenticate → authorize → route → handler (decode, admission,
strategy, store) → storage. Health, version, discovery, OpenAPI and metrics
are non-resource paths answered here.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import os
import resource
import signal
import ssl
import time
from typing import Any

from aiohttp import hdrs, web

from ..admission.chain import RequestRecord, begin_request, end_request
from ..admission.plugins import build_chain
from ..admission.webhook.metrics import WebhookMetrics
from ..api import codec, names, tlsverify
from ..api import status as st
from ..api.kinds import REGISTRY, Registry
from ..api.user import SYSTEM_USER, UserInfo
from ..apiextensions.controller import DefinitionController
from ..apiextensions.definition import DefinitionStrategy
from ..audit.auditor import Auditor
from ..audit.auditor import Backend as AuditBackend
from ..audit.event import RequestAudit
from ..audit.logbackend import AuditWriteError, LogBackend
from ..audit.webhook import WebhookBackend
from ..authn.union import Authentication
from ..authz.authorizer import AuthzAttributes, forbidden_error, request_attributes, user_or_anonymous
from ..authz.authorizer import Decision as AuthzDecision
from ..authz.modes import build_authorizer
from ..authz.rbac import RbacIndex, RbacWriteGuard
from ..authz.webhook import WebhookAuthorizer
from ..client.local import LocalClient
from ..controllers.manager import Controllers
from ..options import Options
from ..pki import Pki, write_admin_config
from ..registry.core import ServiceStrategy
from ..registry.defaultservice import DefaultService
from ..registry.fieldvalidation import warning_header
from ..registry.lookup import ObjectLookup
from ..registry.servicerepair import ServiceRangeRepair
from ..registry.services import ServiceAllocators
from ..registry.store import Store
from ..storage.cacher import WatchCache
from ..storage.encryption import EncryptingBackend
from ..storage.interface import Backend, StorageError, StorageFullError, UnavailableError
from ..storage.keys import key_prefix
from ..storage.sqlite import SqliteBackend
from . import auditing, flowcontrol
from .discovery import Discovery, version_info
from .handlers import ResourceHandlers
from .health import Check, Health
from .httpserver import expect_continue, make_server
from .impersonation import impersonate, wants_impersonation
from .listbody import Turns
from .metrics import Metrics
from .negotiation import error_body
from .openapi import OpenAPI
from .resourcemetrics import ResourceMetrics
from .resttable import build_rest_table
from .routing import GROUP_ALIAS_KEY, RequestInfo, command_alias, parse, storage_version_alias
from .timeouts import Deadline, Deadlines, requested_timeout, timed_out
from .workers import report_serving

log = logging.getLogger("orch-apiserver")

PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version")


def version_stage(version: str) -> str:
    if "alpha" in version:
        return "alpha"
    if "beta" in version:
        return "beta"
    return "ga"


def _admission_warnings(resp: web.StreamResponse, record: RequestRecord) -> web.StreamResponse:
    """Admission plugins' warnings as ``Warning`` headers (each once), as upstream's
    warning recorder sends them; a response already streaming keeps what it sent."""
    if record.warnings and not resp.prepared:
        sent = set(resp.headers.getall("Warning", []))
        for text in record.warnings:
            value = warning_header(" ".join(text.splitlines()))
            if value not in sent:
                sent.add(value)
                resp.headers.add("Warning", value)
    return resp


# The verbs either long-running test (auditing.long_running, flowcontrol.is_long_running)
# can answer True for without a sub-resource or a watch parameter.
_MAYBE_LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})

# Verbs that, without a sub-resource, never reach admission; their requests get no record.
_PLAIN_READ_VERBS = frozenset({"get", "list", "watch"})
_NO_RECORD = RequestRecord()  # never set as the current record, so nothing is added to it

# A body larger than this goes out in slices of this size, each once the previous ones
# have left the connection's buffer and it is the body's turn (large bodies take turns
# with one another, see server/listbody.py): the event loop serves other requests
# between slices, and the request holds its flow-control seat until its body is sent.
_SEND_SLICE = 256 * 1024
_SEND_PATIENCE = 60.0


async def _send_now(request: web.Request, resp: web.StreamResponse, turns: Turns) -> web.StreamResponse:
    """Write a large finished response now, in slices, rather than after the handler
    returns (aiohttp then finds it sent); returns what was sent. A client gone meanwhile
    ends it quietly."""
    if resp.prepared or not isinstance(resp, web.Response) or not isinstance(resp.body, (bytes, bytearray)):
        return resp
    body = resp.body
    if len(body) <= _SEND_SLICE or request.method == "HEAD":
        # Small: aiohttp writes it once the request is done (its audit events written first).
        return resp
    try:
        out = web.StreamResponse(status=resp.status, reason=resp.reason, headers=resp.headers)
        out.content_length = len(body)
        await out.prepare(request)
        transport = request.transport
        view = memoryview(body)
        lane = turns.lane(request)
        # A client that reads too slowly stops holding up the rest after this long: what
        # is left is handed to the connection's buffer at once.
        give_up = time.monotonic() + _SEND_PATIENCE
        for start in range(0, len(body), _SEND_SLICE):
            if start:
                await lane.take()
            await out.write(view[start : start + _SEND_SLICE])
            # Polled, doubling from half a millisecond: the next slice follows soon after a
            # reading client has taken the previous ones.
            pause = 0.0005
            while transport is not None and transport.get_write_buffer_size() > _SEND_SLICE:
                if transport.is_closing() or time.monotonic() >= give_up:
                    break
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.05)
        await out.write_eof()
        return out
    except (ConnectionError, RuntimeError):
        return resp


def storage_error_status(exc: StorageError) -> st.ApiError:
    """The Status of a storage failure that reached the request handler. A full
    store is a 500 InternalError naming the cause (as upstream answers etcd's
    exceeded space quota; retrying does not help until room is made), an
    unreachable one a 503 with Retry-After, anything else a 500."""
    if isinstance(exc, StorageFullError):
        log.error("write refused: storage is full: %s", exc)
        return st.internal(f"storage is full: {exc}")
    if isinstance(exc, UnavailableError):
        return st.service_unavailable(f"storage is unavailable: {exc}", retry_after=1)
    log.error("storage error: %s", exc)
    return st.internal(f"storage error: {exc}")


class RuntimeConfig:
    """Which group versions (and resources) are served, from --runtime-config."""

    def __init__(self, entries: dict[str, bool]):
        self.entries = entries
        self._answers: dict[tuple[str, str, str], bool] = {}  # the flags are fixed: asked once each

    def enabled(self, group: str, version: str, resource: str = "") -> bool:
        key = (group, version, resource)
        answer = self._answers.get(key)
        if answer is None:
            if len(self._answers) > 4096:  # paths name arbitrary groups and versions
                self._answers.clear()
            answer = self._answers[key] = self._enabled(group, version, resource)
        return answer

    def _enabled(self, group: str, version: str, resource: str) -> bool:
        gv = f"{group}/{version}" if group else version
        e = self.entries
        if resource and f"{gv}/{resource}" in e:
            return e[f"{gv}/{resource}"]
        if gv in e:
            return e[gv]
        if not group and f"api/{version}" in e:
            return e[f"api/{version}"]
        stage = version_stage(version)
        if f"api/{stage}" in e:
            return e[f"api/{stage}"]
        if "api/all" in e:
            return e["api/all"]
        return stage == "ga" or gv in names.BETA_SERVED_BY_DEFAULT


def load_backend(opts: Options) -> Backend:
    if opts.storage_backend == "etcd3":
        # Loaded only when chosen: its client (aetcd, grpc) adds about 11 MiB to every server.
        from ..storage.etcd import EtcdBackend

        endpoints = [u.split("//", 1)[1] for u in opts.etcd_servers]
        # Compact every 5 minutes to the revision seen 5 minutes earlier, as upstream does:
        # history and continue tokens stay valid for at least that long.
        return EtcdBackend(endpoints, prefix=opts.etcd_prefix, compaction_interval=300.0)
    return SqliteBackend(os.path.join(opts.data_dir, "state.db"))


def authorization_webhook(opts: Options) -> WebhookAuthorizer | None:
    if opts.authorization_webhook is None:
        return None
    return WebhookAuthorizer(
        opts.authorization_webhook,
        opts.authorization_webhook_version,
        opts.authorization_webhook_cache_authorized_ttl,
        opts.authorization_webhook_cache_unauthorized_ttl,
    )


class ApiServer:
    def __init__(self, opts: Options, backend: Backend | None = None, registry: Registry = REGISTRY):
        self.opts = opts
        # This server's own registry: custom resource definitions add kinds to it at run time.
        registry = registry.copy()
        self.registry = registry
        self.runtime = RuntimeConfig(opts.runtime_config)
        raw_backend = backend or load_backend(opts)
        self.backend: Backend = raw_backend
        decode = None
        if opts.encryption is not None:
            # Encryption at rest: the store and every direct user write and read through the
            # wrapper; the watch cache decrypts each value itself (see storage/encryption.py).
            self.backend = EncryptingBackend(raw_backend, opts.encryption)
            decode = opts.encryption.from_storage
        self.cache = WatchCache(raw_backend, list(registry.kinds), key_prefix, decode)
        self.store = Store(self.backend, registry, self.cache)
        crd_kind = registry.by_resource(names.APIEXTENSIONS_GROUP, "v1", "customresourcedefinitions")
        assert crd_kind is not None
        self.store.set_strategy(crd_kind, DefinitionStrategy(crd_kind))
        # Service cluster IPs and node ports: allocated in the Service strategy's write
        # hooks, repaired against the Services, and the 'orch' Service with its endpoints.
        self.service_allocators = ServiceAllocators(
            self.backend, list(opts.service_cluster_ip_ranges), *opts.service_node_port_range
        )
        service_strategy = self.store.strategy(registry.by_resource("", "v1", "services"))
        assert isinstance(service_strategy, ServiceStrategy)
        service_strategy.allocators = self.service_allocators
        self.service_repair = ServiceRangeRepair(self.store, registry, self.service_allocators)
        self._service_stop = asyncio.Event()
        self._service_tasks: list[asyncio.Task] = []
        # Authorization reads the watch cache, so it is wired before the cache's first list;
        # the RBAC index also serves the always-on role and binding write checks.
        self.rbac_index = RbacIndex.attach(self.cache, registry)
        self.authorizer = build_authorizer(
            opts.authorization_modes,
            self.cache,
            registry,
            self.rbac_index,
            opts.authorization_policies,
            authorization_webhook(opts),
        )
        self.admission_webhook_metrics = WebhookMetrics()
        self.store.admission = build_chain(
            self, opts.admission_plugins, always=[RbacWriteGuard(self.authorizer, self.rbac_index)]
        )
        self.metrics = Metrics()
        self.metrics.object_counts = self.cache.object_counts
        self.metrics.sources.append(self.admission_webhook_metrics.render)
        if isinstance(raw_backend, SqliteBackend):
            self.metrics.sources.append(raw_backend.render_metrics)
        self.handlers = ResourceHandlers(self)
        host = opts.advertise_address or (
            opts.bind_address if opts.bind_address not in ("0.0.0.0", "::") else "127.0.0.1"
        )
        self.server_url = (
            f"https://{host}:{opts.secure_port}" if ":" not in host else f"https://[{host}]:{opts.secure_port}"
        )
        self.discovery = Discovery(registry, self.enabled, f"{host}:{opts.secure_port}")
        self.default_service = DefaultService(
            self.store, registry, self.service_allocators, opts.endpoint_address or host, opts.secure_port
        )
        self.openapi = OpenAPI(registry, self.enabled, self.discovery.group_versions())
        registry.listeners.append(
            lambda added, removed: self.openapi.set_custom_kinds(k for k in registry.kinds if k.custom)
        )
        self.health = Health(opts.livez_grace_period)
        self.shutting_down = False
        self.post_start_done: dict[str, bool] = {}
        self._install_checks()
        self.pki = Pki(opts.data_dir)
        # The resource metrics API's scraper of the node agents (kubectl top); the horizontal
        # pod autoscaler reads pods' usage from it.
        self.resource_metrics = ResourceMetrics(self, self.cache, registry, opts.metric_resolution)
        # The bundled controllers: API clients of this process, each as its own identity.
        self.controllers = Controllers(
            opts,
            self.store,
            self.cache,
            registry,
            self.authorizer,
            ca_files=(self.pki.ca_cert, self.pki.ca_key),
            server_url=self.server_url,
            pod_metrics=self.resource_metrics,
        )
        self.client_ca = opts.client_ca_file or self.pki.ca_cert
        # Authentication reads the token file and the service-account keys now (a bad one
        # stops the start) and generates DATA_DIR/pki/sa.key on first start.
        self.authn = Authentication(opts, ObjectLookup(self.cache, registry, self.store), self.client_ca)
        # The REST objects of collections and sub-resources beyond the generic store.
        self.rest = build_rest_table(self, lambda: self.authorizer, self.resource_metrics)
        # Custom resource definitions: the kinds they define are served while they last.
        self.definitions = DefinitionController(self.store, self.cache, registry, self.rest)
        self._inflight = 0
        # API priority and fairness, or (when off) the plain in-flight limits.
        self.flow_control: flowcontrol.FlowControl | None = None
        self.inflight_limits: flowcontrol.InflightLimits | None = None
        if opts.enable_priority_and_fairness:
            self.flow_control = flowcontrol.FlowControl(
                self.cache,
                registry,
                LocalClient(self.store, self.authorizer, SYSTEM_USER, names.APISERVER_FIELD_MANAGER),
                opts.max_requests_inflight + opts.max_mutating_requests_inflight,
                # As upstream: a request waits in a queue at most a quarter of --request-timeout.
                wait_limit=opts.request_timeout / 4,
            )
            self.metrics.sources.append(self.flow_control.render_metrics)
        else:
            self.inflight_limits = flowcontrol.InflightLimits(
                opts.max_requests_inflight, opts.max_mutating_requests_inflight
            )
            self.metrics.sources.append(self.inflight_limits.render_metrics)
        self.deadlines = Deadlines(opts.request_timeout)
        # Audit logging: a policy and at least one backend, or nothing is recorded.
        audit_backends: list[AuditBackend] = []
        if opts.audit_log is not None:
            audit_backends.append(LogBackend(opts.audit_log))
        if opts.audit_webhook is not None:
            audit_backends.append(WebhookBackend(opts.audit_webhook))
        self.auditor: Auditor | None = (
            Auditor(opts.audit_policy, audit_backends) if opts.audit_policy is not None and audit_backends else None
        )
        if self.auditor is not None:
            self.metrics.sources.append(self.auditor.render_metrics)

    def enabled(self, group: str, version: str, resource: str = "") -> bool:
        """Whether a group version (or resource) is served: --runtime-config decides for the
        built-in kinds; a custom resource's versions are served as its definition says."""
        kind = self.registry.by_resource(group, version, resource) if resource else None
        if kind is not None and kind.custom:
            return True
        return self.runtime.enabled(group, version, resource)

    # --- health ---------------------------------------------------------------------
    def _install_checks(self) -> None:
        async def ok() -> None:
            return None

        async def storage() -> str | None:
            try:
                async with asyncio.timeout(2.0):
                    await self.backend.current_revision()
            except Exception as exc:  # noqa: BLE001 - any storage failure is the health check's answer
                return f"storage is unreachable: {exc}"
            return None

        async def shutdown() -> str | None:
            return "the server is shutting down" if self.shutting_down else None

        self.health.add(Check("ping", ok))
        self.health.add(Check("log", ok))
        self.health.add(Check("etcd" if self.opts.storage_backend == "etcd3" else "sqlite", storage))
        for hook in ("start-watch-cache", "bootstrap-namespaces", "bootstrap-controller", "start-controllers"):
            self.post_start_done[hook] = False

            async def done(h=hook) -> str | None:
                return None if self.post_start_done[h] else "not finished"

            self.health.add(Check(f"poststarthook/{hook}", done, post_start=True))
        self.health.add(Check("shutdown", shutdown), endpoints=("readyz",))

    # --- start-up -------------------------------------------------------------------
    def prepare_files(self) -> list[str]:
        """Certificates and the admin connection config; returns what was created."""
        os.makedirs(self.opts.data_dir, mode=0o700, exist_ok=True)
        created = []
        if not self.opts.tls_cert_file:
            hosts = (
                [self.opts.bind_address, self.opts.advertise_address]
                if self.opts.advertise_address
                else [self.opts.bind_address]
            )
            created += self.pki.ensure(hosts)
        elif not os.path.exists(self.pki.ca_cert):
            created += self.pki.ensure([self.opts.bind_address])
        admin = os.path.join(self.opts.data_dir, "admin" + names.CONNECTION_CONFIG_SUFFIX)
        if write_admin_config(self.pki, admin, self.server_url):
            created.append(admin)
        return created

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        cert = self.opts.tls_cert_file or self.pki.serving_cert
        key = self.opts.tls_private_key_file or self.pki.serving_key
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(self.client_ca)
        if self.opts.requestheader_client_ca_file:
            ctx.load_verify_locations(self.opts.requestheader_client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
        # Ask for a client certificate but accept any in the handshake: the x509
        # authenticator verifies it and answers 401 (upstream's RequestClientCert). When
        # that cannot be set up safely, the handshake keeps verifying (logged).
        tlsverify.request_client_certificates(ctx)
        return ctx

    async def start_storage(self) -> None:
        await self.backend.start()
        await self.cache.start()
        await self.definitions.start()
        self.post_start_done["start-watch-cache"] = True
        await self.bootstrap_namespaces()
        self.post_start_done["bootstrap-namespaces"] = True
        if self.flow_control is not None:
            await self.flow_control.start()
        await self.authn.start()
        await self.publish_authentication_configmap()
        await self.start_services()
        self.post_start_done["bootstrap-controller"] = True
        await self.controllers.start()
        self.post_start_done["start-controllers"] = True
        self.resource_metrics.start()

    async def bootstrap_namespaces(self) -> None:
        kind = self.registry.by_resource("", "v1", "namespaces")
        for ns in names.INITIAL_NAMESPACES:
            try:
                await self.store.create(
                    kind, "", {"metadata": {"name": ns}}, SYSTEM_USER, field_manager=names.APISERVER_FIELD_MANAGER
                )
                log.info("created namespace %s", ns)
            except st.ApiError as exc:
                if exc.code != 409:
                    raise

    async def publish_authentication_configmap(self) -> None:
        """orch-system/extension-apiserver-authentication: the client CA and the front
        proxy's settings, kept as this server sees them (upstream publishes the same)."""
        data = self.authn.published_configmap_data()
        kind = self.registry.by_resource("", "v1", "configmaps")
        name = names.EXTENSION_AUTHENTICATION_CONFIGMAP

        def with_data(obj: dict) -> dict:
            obj["data"] = dict(data)
            return obj

        def fresh() -> dict:
            return with_data(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": names.NS_SYSTEM}}
            )

        await self.store.update(
            kind,
            names.NS_SYSTEM,
            name,
            with_data,
            SYSTEM_USER,
            create_on_missing=True,
            on_missing=fresh,
            field_manager=names.APISERVER_FIELD_MANAGER,
        )

    async def start_services(self) -> None:
        """The Service ranges made to match the stored Services, the 'orch' Service and
        its endpoints, then the loops that keep both so."""
        await self.service_repair.repair()
        await self.default_service.start()
        self._service_stop.clear()
        self._service_tasks = [
            asyncio.create_task(self.service_repair.run(self._service_stop), name="service-range-repair"),
            asyncio.create_task(self.default_service.run(self._service_stop), name="default-service-endpoints"),
        ]

    async def stop_services(self) -> None:
        self._service_stop.set()
        for task in self._service_tasks:
            task.cancel()
        await asyncio.gather(*self._service_tasks, return_exceptions=True)
        self._service_tasks = []
        await self.default_service.shutdown()

    async def stop_storage(self) -> None:
        await self.resource_metrics.stop()
        if self.flow_control is not None:
            await self.flow_control.stop()
        await self.stop_services()
        await self.controllers.stop()
        await self.definitions.stop()
        await self.authn.stop()
        await self.authorizer.close()
        await self.cache.stop()
        await self.backend.close()

    # --- requests -------------------------------------------------------------------
    async def authorize(
        self,
        user: UserInfo | None,
        info: RequestInfo,
        query=None,
        audit: RequestAudit | None = None,
        request: web.Request | None = None,
    ) -> None:
        """Ask the authorizer chain (--authorization-mode), every authorizer (the webhook
        too); anything not allowed is a 403 naming the user, verb and resource, and a
        request nobody allowed while an authorizer failed is a 500 naming the failure, as
        upstream. ``None`` is the anonymous user. The decision and its reason go on the
        request's audit event."""
        attrs = request_attributes(user, info, query)
        if self.authorizer.waits:
            decision, reason, error = await self.authorizer.decide(attrs)
        else:
            (decision, reason), error = self.authorizer.authorize(attrs), ""
        self._decided(attrs, decision, reason, error, info, audit, request)

    def _decided(
        self,
        attrs: AuthzAttributes | None,
        decision: AuthzDecision,
        reason: str,
        error: str,
        info: RequestInfo,
        audit: RequestAudit | None,
        request: web.Request | None,
    ) -> None:
        """The authorizer's answer taken: noted on the audit event, raised unless allowed."""
        allowed = decision is AuthzDecision.ALLOW
        if not allowed and error:
            uri = request.path_qs if request is not None else info.path
            log.error("authorization of %s failed: %s", uri, error)
            if audit is not None:
                audit.annotations[names.AUDIT_REASON_ANNOTATION] = "internal error"
            raise st.ApiError(500, "InternalError", f'Internal Server Error: "{uri}": {error}')
        if audit is not None:
            audit.annotations[names.AUDIT_DECISION_ANNOTATION] = "allow" if allowed else "forbid"
            audit.annotations[names.AUDIT_REASON_ANNOTATION] = reason  # also when empty, as upstream
        if not allowed:
            assert attrs is not None  # only an allowed answer comes without attributes
            raise forbidden_error(attrs, reason)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        auditing.start(request)  # the Audit-ID every response carries (auditing.response_starting)
        if hdrs.EXPECT in request.headers:
            await expect_continue(request)  # before anything reads the body
        info = parse(request.method, request.path, request.query, self.registry, self.runtime.enabled)
        command_alias(info, request.headers.get(names.KUBECTL_COMMAND_HEADER))
        # For the edges (body decoding, response writing), which answer an alias group in its
        # spelling (absent: none; httpserver.ApiRequest's get is a plain dict lookup).
        kind = info.kind
        alias = info.alias or (storage_version_alias(info) if kind is not None and kind.custom else None)
        if alias is not None:
            request[GROUP_ALIAS_KEY] = alias
        code = 500
        self._inflight += 1
        # Admission plugins' warnings (and audit annotations) for this request; a plain read
        # runs no admission, so it has nothing to collect.
        record_token: contextvars.Token | None = None
        if info.subresource or info.verb not in _PLAIN_READ_VERBS:
            record, record_token = begin_request()
        else:
            record = _NO_RECORD
        audit: RequestAudit | None = None
        resp: web.StreamResponse | None = None
        status: dict[str, Any] | None = None
        stage = "ResponseComplete"
        ticket: flowcontrol.Ticket | None = None
        inflight_kind: str | None = None
        deadline: Deadline | None = None
        try:
            query = request.query
            # Most requests give neither long-running test anything to look at.
            plain = not info.subresource and info.verb not in _MAYBE_LONG_RUNNING_VERBS and "watch" not in query
            if plain or not auditing.long_running(info, request):  # --request-timeout (server/timeouts.py)
                deadline = self.deadlines.start(
                    requested_timeout(query, self.deadlines.default) if "timeout" in query else self.deadlines.default
                )
                if record_token is not None:
                    record.deadline = deadline.at  # what admission webhooks' calls may take at most
            # The user of a connection's known client certificate, else the authenticators'
            # answer: None for an anonymous request (when --anonymous-auth allows it), a 401
            # ApiError for a bad credential (authn/union.py).
            user = self.authn.connection_user(request)
            if user is None:
                try:
                    user = await self.authn.authenticate(request)
                except st.ApiError as exc:
                    if self.auditor is not None and exc.code == 401:
                        # As upstream: one ResponseStarted event, with no user, for a failed authentication.
                        audit = auditing.begin(self.auditor, request, info, None)
                        if audit is not None:
                            audit.base["user"] = {}
                            stage = "ResponseStarted"
                    raise
            request = self.authn.strip_proxy_headers(request)
            if self.auditor is not None:
                audit = auditing.begin(self.auditor, request, info, user)
            real_user = user
            if wants_impersonation(request.headers):  # Impersonate-* headers
                request, user = await impersonate(request, user, self.authorizer)
            if audit is not None:
                if user is not real_user:
                    audit.impersonated(real_user, user)
                assert self.auditor is not None
                self.auditor.emit(audit, "RequestReceived")
            if self.flow_control is not None:
                admitted = self.flow_control.admit_now(
                    user,
                    info.is_resource,
                    info.verb,
                    info.group,
                    info.resource,
                    info.subresource,
                    info.namespace,
                    request.path,
                    info.kind,
                    query,
                )
                ticket = await admitted.wait() if isinstance(admitted, flowcontrol.Queued) else admitted
                if ticket is not None:
                    ticket.long_running = not plain and flowcontrol.is_long_running(info.verb, info.subresource, query)
                    flowcontrol.CURRENT.set(ticket)
            elif self.inflight_limits is not None and (
                plain or not flowcontrol.is_long_running(info.verb, info.subresource, query)
            ):
                inflight_kind = self.inflight_limits.enter(user, info.verb)
            if user is not None and self.authorizer.allows_outright(user):  # a privileged group's member
                self._decided(None, AuthzDecision.ALLOW, "", "", info, audit, request)
            elif self.authorizer.waits:
                await self.authorize(user, info, query, audit, request)
            else:  # the common case, without a coroutine of its own
                attrs = request_attributes(user, info, query)
                self._decided(attrs, *self.authorizer.authorize(attrs), "", info, audit, request)
            if info.is_resource:
                resp = await self.handlers.handle(request, info, user_or_anonymous(user))
                self.deadlines.finish(deadline)  # no await may come between the work and this
                self._deprecation(info, resp)
                if record.warnings:
                    _admission_warnings(resp, record)
            else:
                resp = await self.non_resource(request, info)
                self.deadlines.finish(deadline)
            code = resp.status
            if (ticket is not None and not ticket.long_running) or inflight_kind is not None:
                # The request holds its seat until its body is written (a large LIST costs
                # most while its response goes out), as the handler's time does upstream.
                # (A response prepared meanwhile gets the ticket's headers from the
                # prepare hook; one that is not, below.)
                return await _send_now(request, resp, self.handlers.turns)
            return resp
        except st.ApiError as exc:
            code = exc.code
            status = exc.to_status()
            resp = _admission_warnings(self.error_response(request, exc), record)
            return resp
        except AuditWriteError as exc:  # blocking-strict: the request is not served unaudited
            code = 500
            audit = None
            auditing.CURRENT.set(None)
            resp = self.error_response(request, st.internal(str(exc)))
            return resp
        except asyncio.CancelledError:
            if deadline is None or not deadline.expired:
                code = 499
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # our own cancel: a 504
            err = timed_out()
            code, status = err.code, err.to_status()
            resp = self.error_response(request, err)
            return resp
        except StorageError as exc:  # a storage failure no handler turned into a Status itself
            err = storage_error_status(exc)
            code = err.code
            status = err.to_status()
            resp = self.error_response(request, err)
            return resp
        except Exception as exc:  # noqa: BLE001 - never let a bug answer a non-Status body
            log.exception("internal error serving %s %s", request.method, request.path)
            code = 500
            stage = "Panic"
            err = st.internal(f"{type(exc).__name__}: {exc}")
            status = err.to_status()
            resp = self.error_response(request, err)
            return resp
        finally:
            if ticket is not None:
                if resp is not None and not resp.prepared:
                    resp.headers.update(ticket.headers)
                ticket.release()
                flowcontrol.CURRENT.set(None)
            elif inflight_kind is not None:
                assert self.inflight_limits is not None
                self.inflight_limits.leave(inflight_kind)
            self.deadlines.finish(deadline)
            if record_token is not None:
                end_request(record_token)
            if audit is not None:
                self._audit_finish(audit, request, info, resp, code, status, record, stage)
            self._inflight -= 1
            if info.is_resource and info.kind is not None:
                scope = "namespace" if info.namespace else ("resource" if info.name else "cluster")
                self.metrics.observe(
                    info.verb.upper() if info.verb == "watch" and False else info.verb.upper(),
                    info.group,
                    info.version,
                    info.resource,
                    info.subresource,
                    scope,
                    code,
                    time.perf_counter() - t0,
                )

    def _audit_finish(
        self,
        audit: RequestAudit,
        request: web.Request,
        info: RequestInfo,
        resp: web.StreamResponse | None,
        code: int,
        status: dict[str, Any] | None,
        record: RequestRecord,
        stage: str,
    ) -> None:
        """The last event of a recorded request: ResponseComplete (Panic after a bug)."""
        assert self.auditor is not None
        auditing.capture_bodies(audit, request, resp)
        auditing.complete(audit, code, status)
        audit.annotations.update(record.audit_annotations)
        if info.kind is not None and info.kind.deprecated:
            audit.annotations[names.AUDIT_DEPRECATED_ANNOTATION] = "true"
        try:
            self.auditor.emit(audit, stage)
        except AuditWriteError:
            log.error("audit event %s (%s) was not written", audit.id, stage)
        auditing.CURRENT.set(None)

    def _deprecation(self, info: RequestInfo, resp: web.StreamResponse) -> None:
        k = info.kind
        if k is not None and k.deprecated and not resp.prepared:
            resp.headers.add(
                "Warning",
                f'299 - "{k.api_version} {k.kind} is deprecated'
                + (f"; unavailable in v{k.removed_release}+" if k.removed_release else "")
                + '"',
            )
            self.metrics.deprecated_request(k.group, k.version, k.resource, info.subresource, k.removed_release)

    def error_response(self, request: web.Request, exc: st.ApiError) -> web.Response:
        # Protobuf when the client asked for it (clients decode errors by Content-Type).

        body, ctype = error_body(request.headers.get("Accept"), exc.to_status())
        resp = web.Response(body=body, status=exc.code, content_type=ctype)
        for k, v in exc.headers.items():
            resp.headers[k] = v
        return resp

    async def non_resource(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if request.method not in ("GET", "HEAD"):
            raise st.method_not_allowed()
        for endpoint in ("healthz", "livez", "readyz"):
            if path == f"/{endpoint}":
                return await self.health.handle(request, endpoint)
            if path.startswith(f"/{endpoint}/"):
                return await self.health.handle(request, endpoint, path[len(endpoint) + 2 :])
        if path == "/version":
            return self.json(request, version_info())
        if path == "/metrics":
            return web.Response(
                text=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
            )
        if path == "/api":
            return self.json(request, self.discovery.api_versions())
        if path == "/apis":
            return self.json(request, self.discovery.api_group_list())
        segs = path.strip("/").split("/")
        if segs[0] == "api" and len(segs) == 2:
            doc = self.discovery.resource_list("", segs[1])
            if doc is not None:
                return self.json(request, doc)
        if segs[0] == "apis" and len(segs) == 2:
            doc = self.discovery.api_group(segs[1])
            if doc is not None:
                return self.json(request, doc)
        if segs[0] == "apis" and len(segs) == 3:
            doc = self.discovery.resource_list(segs[1], segs[2])
            if doc is not None:
                return self.json(request, doc)
        if self.openapi.handles(path):
            resp = self.openapi.handle(request)
            if resp is not None:
                return resp
        if path == "/":
            paths = sorted(
                {"/api", "/apis", "/healthz", "/livez", "/readyz", "/version", "/metrics", "/openapi/v2", "/openapi/v3"}
                | {f"/api/{v}" if not g else f"/apis/{g}/{v}" for g, v in self.discovery.group_versions()}
            )
            return self.json(request, {"paths": paths})
        raise st.ApiError(
            404,
            "NotFound",
            "the server could not find the requested resource",
            details={"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]},
        )

    def json(self, request: web.Request, obj: Any) -> web.Response:
        pretty = request.query.get("pretty")
        body = (
            codec.dumps_pretty(obj) if pretty is not None and pretty.lower() in ("", "1", "true") else codec.dumps(obj)
        )
        return web.Response(body=body, content_type="application/json")

    def make_server(self) -> web.Server:
        """Every path goes to :meth:`dispatch` (server/httpserver.py)."""
        return make_server(self.dispatch, self.opts.max_request_body_bytes + 1024, access_log=None)

    async def serve(self, stop: asyncio.Event, worker: tuple[int, int] | None = None) -> int:
        """Serve until ``stop``. ``worker``: (index, ready descriptor) when this process is
        one of several sharing the port (server/workers.py)."""
        created = self.prepare_files()
        for path in created:
            log.info("created %s", path)
        await self.start_storage()
        if self.auditor is not None:
            self.auditor.start()
        runner = web.ServerRunner(self.make_server(), handle_signals=False, shutdown_timeout=30.0)
        await runner.setup()
        site = web.TCPSite(
            runner,
            self.opts.bind_address,
            self.opts.secure_port,
            ssl_context=self.ssl_context(),
            backlog=1024,
            reuse_address=True,
            reuse_port=worker is not None,
        )
        try:
            await site.start()
        except OSError as exc:
            log.error("cannot listen on %s:%s: %s", self.opts.bind_address, self.opts.secure_port, exc)
            await runner.cleanup()
            await self.stop_storage()
            return 1
        if worker is not None:
            report_serving(worker[1])
        # The objects made at start live as long as the server: keep them out of the
        # collector's generations, and let the young generation grow with the many
        # short-lived objects of concurrent requests. At the default threshold (700)
        # the collector cost ~125 µs per create under 64 clients; at 20,000 about 3 µs.
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 10, 10)
        admin = os.path.join(self.opts.data_dir, "admin" + names.CONNECTION_CONFIG_SUFFIX)
        log.info(
            "%s serving on %s (storage: %s); admin connection config: %s",
            names.APISERVER_NAME,
            self.server_url,
            self.opts.storage_backend,
            admin,
        )
        await stop.wait()
        log.info(
            "shutting down: /readyz now fails; waiting %.1fs before closing the listener",
            self.opts.shutdown_delay_duration,
        )
        self.shutting_down = True
        if self.opts.shutdown_delay_duration > 0:
            await asyncio.sleep(self.opts.shutdown_delay_duration)
        await site.stop()
        if self.opts.shutdown_watch_termination_grace_period > 0:
            await asyncio.sleep(self.opts.shutdown_watch_termination_grace_period)
        await self.cache.stop()  # ends every watch stream
        await runner.cleanup()  # waits for in-flight requests
        if self.auditor is not None:
            await self.auditor.shutdown()
        await self.stop_storage()
        log.info("stopped")
        return 0


def raise_open_file_limit() -> None:
    """Every watch holds a connection: lift the soft descriptor limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)


def run(opts: Options, worker: tuple[int, int] | None = None) -> int:
    """Run the API server; ``worker`` when this process is one that a ``--workers``
    supervisor started (server/workers.py)."""
    try:
        import uvloop  # type: ignore

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass

    raise_open_file_limit()

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = ApiServer(opts)
        return await server.serve(stop, worker)

    try:
        return asyncio.run(main())
    except Exception as exc:  # noqa: BLE001 - a clear last word instead of a traceback
        log.error("fatal: %s", exc, exc_info=logging.getLogger().isEnabledFor(logging.DEBUG))
        return 1

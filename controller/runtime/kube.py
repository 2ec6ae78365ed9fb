"""The Kubernetes API at the edge: connecting, resources, and raw JSON requests.

kubernetes_asyncio provides the configuration (kubeconfig, in-cluster, token
refresh) and its aiohttp session; requests and watch streams are encoded and
decoded here with orjson, which is what the controller spends most of its
time on under load. Every HTTP error becomes an `ApiError` carrying the
Kubernetes Status reason, so callers can tell NotFound from Conflict.
"""

from __future__ import annotations

import copy
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import orjson
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from kubernetes_asyncio import client, config
from yarl import URL

JSON = dict[str, Any]

# The patch types `Kube.patch` sends: a JSON merge patch (RFC 7386, the default: a list is
# replaced whole), or Kubernetes' strategic merge patch, for built-in kinds only, which
# merges a list by the key its schema names (patchMergeKey).
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# A server-side apply: the body is the whole intent of one field manager (JSON is YAML).
APPLY_PATCH = "application/apply-patch+yaml"
# The methods that write, and so name a field manager (managedFields).
_WRITES = frozenset({"POST", "PUT", "PATCH"})
# What a metadata-only list and watch ask for (client-go's metadata client, which
# controller-runtime's builder.OnlyMetadata uses): each object as a PartialObjectMetadata,
# its metadata and nothing else, so a Secret's data never reaches the process. No plain
# application/json fallback: a server that cannot do it refuses (406) rather than sending
# whole objects.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

# The API server names a writer in managedFields by the request's fieldManager, else by
# its User-Agent up to the "/" (aiohttp's default made ours "Python"). The controller's
# writes name Shipwright's field managers (`Kube.with_field_manager`); the User-Agent
# still tells the two apart in the API server's logs and audit.
USER_AGENT = "buildrun-controller/0.1.0"

# The annotation of the BOOKMARK that ends a watch-list's initial events (metav1's
# InitialEventsAnnotationKey): from it on, the stream carries changes.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

# Seconds a watch may run past the timeoutSeconds it asked for before the client gives
# up on it as silent. Was 30: a stalled watch could go unnoticed for 330-630 s with the
# informers' 300-600 s watches; ending a healthy watch a little early costs only a
# resume from the last resourceVersion.
WATCH_TIMEOUT_MARGIN = 5.0


@dataclass(frozen=True)
class Resource:
    """A kind of object the controller reads or writes, addressed by group/version/plural."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            root += f"/namespaces/{quote(namespace, safe='')}"
        root += f"/{self.plural}"
        if name is not None:
            root += f"/{quote(name, safe='')}"
        if subresource:
            root += f"/{subresource}"
        return root


SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PODS = Resource("", "v1", "pods", "Pod")
SECRETS = Resource("", "v1", "secrets", "Secret")
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status fields."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @classmethod
    def from_body(cls, status: int, body: bytes) -> ApiError:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            return cls(status, str(decoded.get("reason", "")), str(decoded.get("message", "")))
        return cls(status, "", body[:1000].decode(errors="replace"))


class ConfigError(Exception):
    """No usable connection settings: a clear one-line message for the CLI."""


async def load_api_client(
    kubeconfig: str | None = None, context: str | None = None
) -> client.ApiClient:
    """--kubeconfig, else in-cluster when in a pod, else $KUBECONFIG or ~/.kube/config."""
    cfg = client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg
            )
        else:
            path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube/config")
            if not Path(path).is_file():  # noqa: ASYNC240 - once, at start-up
                raise ConfigError(f"kubeconfig {path} does not exist")
            await config.load_kube_config(
                config_file=path, context=context, client_configuration=cfg
            )
    except ConfigError:
        raise
    except Exception as exc:  # the loaders raise many unrelated types
        raise ConfigError(f"cannot load Kubernetes configuration: {exc}") from exc
    return client.ApiClient(configuration=cfg)


class Kube:
    """Raw JSON requests over kubernetes_asyncio's authenticated session.

    `field_manager`, when set, is sent as the `fieldManager` of every write (create,
    update, patch), as controller-runtime's client.WithFieldOwner does; unset, the API
    server takes it from the User-Agent. `with_field_manager` makes a view that shares
    this client's connections."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0,
                 field_manager: str | None = None) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self._host = str(api_client.configuration.host).rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        # One session, shared by every view `with_field_manager` makes (a list, so a
        # copy refers to the same one).
        self._sessions: list[aiohttp.ClientSession] = []
        # kubernetes_asyncio's session has trust_env=True, so aiohttp looked up the proxy
        # (environment, no_proxy, ~/.netrc) and netrc credentials for the host on every
        # request, each in a worker thread: under load that was half the controller's
        # CPU. The host never changes, so both are looked up here, once, the same way.
        self._proxy, self._proxy_auth = _env_proxy(URL(self._host))
        self._netrc_auth = _netrc_auth(URL(self._host).host)

    def with_field_manager(self, name: str) -> Kube:
        """This client, writing as field manager `name` (controller-runtime's
        client.WithFieldOwner): the same connections; `close` the original, once."""
        view = copy.copy(self)
        view.field_manager = name
        return view

    async def close(self) -> None:
        for session in self._sessions:
            await session.close()
        self._sessions.clear()
        await self.api_client.close()

    async def _headers(self, content_type: str | None,
                       accept: str = "application/json") -> dict[str, str]:
        headers: dict[str, str] = {"Accept": accept, "User-Agent": USER_AGENT}
        if content_type:
            headers["Content-Type"] = content_type
        # Refreshes in-cluster and exec-plugin tokens when they are due.
        await self.api_client.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    @property
    def _session(self) -> aiohttp.ClientSession:
        """kubernetes_asyncio's connection pool (its TLS and client certificates), in a
        session of our own that leaves the environment alone (see __init__)."""
        if not self._sessions:
            pool: aiohttp.ClientSession = self.api_client.rest_client.pool_manager
            self._sessions.append(aiohttp.ClientSession(
                connector=pool.connector, connector_owner=False,
                read_bufsize=2**21,  # as kubernetes_asyncio's: a watch line may be large
            ))
        return self._sessions[0]

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> JSON:
        if method in _WRITES and self.field_manager and not (query and "fieldManager" in query):
            query = {**(query or {}), "fieldManager": self.field_manager}
        data = None if body is None else orjson.dumps(body)
        raw = await self._exchange(method, path, query, data,
                                   content_type if data is not None else None, accept,
                                   self._timeout)
        result: JSON = orjson.loads(raw) if raw else {}
        return result

    async def read(self, path: str, *, query: Mapping[str, str | int] | None = None,
                   timeout: float) -> bytes:
        """A GET whose answer is not JSON (a pod's log: text/plain), as the bytes sent,
        given up after `timeout` seconds (an aiohttp TimeoutError)."""
        return await self._exchange("GET", path, query, None, None, "*/*",
                                    aiohttp.ClientTimeout(total=timeout))

    async def _exchange(self, method: str, path: str, query: Mapping[str, str | int] | None,
                        data: bytes | None, content_type: str | None, accept: str,
                        timeout: aiohttp.ClientTimeout) -> bytes:
        url = self._host + path + ("?" + urlencode(query) if query else "")
        headers = await self._headers(content_type, accept)
        async with self._session.request(
            method, url, data=data, headers=headers, timeout=timeout,
            proxy=self._proxy, proxy_auth=self._proxy_auth, auth=self._netrc_auth,
        ) as resp:
            raw = await resp.read()
            if resp.status >= 400:
                raise ApiError.from_body(resp.status, raw)
            return raw

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        return await self.request("GET", resource.path(namespace, name))

    async def get_or_none(self, resource: Resource, namespace: str | None,
                          name: str) -> JSON | None:
        """The object, or None when it does not exist (404); other errors raise."""
        try:
            return await self.get(resource, namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self, resource: Resource, namespace: str | None, **query: str | int
    ) -> JSON:
        return await self.request("GET", resource.path(namespace), query=query)

    async def list_metadata(
        self, resource: Resource, namespace: str | None, **query: str | int
    ) -> JSON:
        """`list` as a PartialObjectMetadataList: each item's metadata, nothing else."""
        return await self.request("GET", resource.path(namespace), query=query,
                                  accept=METADATA_LIST)

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        return await self.request("POST", resource.path(namespace), body=body)

    async def put(self, resource: Resource, namespace: str | None, name: str, body: JSON, *,
                  subresource: str = "") -> JSON:
        """Replaces the object (with `subresource` "status", its status only: the API
        server keeps everything else as it holds it); the resourceVersion in `body` makes
        it a compare-and-swap."""
        return await self.request("PUT", resource.path(namespace, name, subresource),
                                  body=body)

    async def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
        force: bool = False,
    ) -> JSON:
        """`force` takes over the fields another manager owns: a server-side apply only
        (APPLY_PATCH)."""
        return await self.request(
            "PATCH", resource.path(namespace, name, subresource), body=body,
            content_type=content_type, query={"force": "true"} if force else None,
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        preconditions: JSON | None = None,
    ) -> JSON:
        body: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request("DELETE", resource.path(namespace, name), body=body)

    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        *,
        timeout_seconds: int,
        metadata_only: bool = False,
        label_selector: str | None = None,
        send_initial_events: bool = False,
    ) -> AsyncIterator[JSON]:
        """Yields decoded watch events until the server ends the stream; an ERROR
        event raises ApiError with its Status code, as an HTTP error would. With
        metadata_only, each event's object is a PartialObjectMetadata; with
        label_selector, only the objects it selects are watched. With
        send_initial_events (a watch-list, KEP 3157), the stream first brings every
        object as it is at `resource_version` or later ("" : the latest, read as a
        consistent list is) as ADDED events, then a BOOKMARK annotated
        INITIAL_EVENTS_END, then the changes as any watch does."""
        query = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource_version:
            query["resourceVersion"] = resource_version
        if send_initial_events:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
        if label_selector:
            query["labelSelector"] = label_selector
        url = self._host + resource.path(namespace) + "?" + urlencode(query)
        headers = await self._headers(None, METADATA if metadata_only else "application/json")
        # The server ends the stream after timeout_seconds. A connection that went
        # silent without closing (half-open: a dead peer, a NAT that forgot it) never
        # ends by itself, so the client ends it a little later, and the informer
        # resumes on a new connection from the last version it saw.
        timeout = aiohttp.ClientTimeout(total=timeout_seconds + WATCH_TIMEOUT_MARGIN,
                                        sock_connect=10)
        async with self._session.get(
            url, headers=headers, timeout=timeout,
            proxy=self._proxy, proxy_auth=self._proxy_auth, auth=self._netrc_auth,
        ) as resp:
            if resp.status >= 400:
                raise ApiError.from_body(resp.status, await resp.read())
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if line.strip():
                    event: JSON = orjson.loads(line)
                    if event.get("type") == "ERROR":
                        # A Status in the stream (410 Gone above all): an error like any other.
                        status = event.get("object") or {}
                        raise ApiError(int(status.get("code") or 500),
                                       str(status.get("reason", "")),
                                       str(status.get("message", "")))
                    yield event


def _env_proxy(url: URL) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy (and its credentials) aiohttp's trust_env picks for `url`, if any."""
    try:
        return get_env_proxy_for_url(url)
    except LookupError:
        return None, None


def _netrc_auth(host: str | None) -> aiohttp.BasicAuth | None:
    """The ~/.netrc ($NETRC) credentials aiohttp's trust_env sends to `host`, if any."""
    if host is None:
        return None
    try:
        return basicauth_from_netrc(netrc_from_env(), host)
    except LookupError:
        return None


def key_of(obj: JSON) -> str:
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.rpartition("/")
    return namespace, name


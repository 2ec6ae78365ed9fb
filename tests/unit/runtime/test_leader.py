"""LeaderElector against a scripted Lease API (no server), on virtual time: when a
candidate may take the lease, when the leader must give it up, and that no shape of
Lease crashes it."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from controller.runtime.kube import JSON, LEASES, ApiError, Kube, Resource
from controller.runtime.leader import LeaderElector, LeadershipLost
from controller.settings import LeaderElectionSettings
from tests.harness import metric
from tests.virtualtime import run

LEASE = 15.0
RENEW = 10.0
RETRY = 2.0

HANG = "hang"  # a scripted step: the call never answers (a stalled connection)


class LeaseApi:
    """One Lease with the API server's rules: create fails if it exists, PUT is a
    compare-and-swap on resourceVersion. `failing` makes every call raise it; `steps`
    script the next calls (an exception, or HANG: the request never arrives);
    `response_delay` holds every answer back after the call took effect (a slow
    network: the server has written, we have not heard); `before_put` runs just
    before a PUT is judged, to let another writer win a race."""

    def __init__(self, spec: Any = None, *, exists: bool = False) -> None:
        self.lease: JSON | None = None
        self.version = 0
        self.failing: Exception | None = None
        self.steps: list[Any] = []
        self.calls: list[str] = []
        self.before_put: Callable[[], None] | None = None
        self.response_delay = 0.0
        self.writes: list[tuple[float, str]] = []  # (loop time, holder) of each write
        if exists or spec is not None:
            self.write(spec)

    def write(self, spec: Any) -> None:
        """Someone else (another replica, a human) writes the Lease."""
        self.version += 1
        holder = spec.get("holderIdentity") if isinstance(spec, dict) else None
        self.writes.append((asyncio.get_running_loop().time(), str(holder)))
        self.lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": "l", "namespace": "ns",
                                   "resourceVersion": str(self.version)},
                      "spec": copy.deepcopy(spec)}
        if spec is None:
            del self.lease["spec"]

    def spec(self) -> JSON:
        assert self.lease is not None
        spec: JSON = self.lease["spec"]
        return spec

    async def _call(self, verb: str) -> None:
        self.calls.append(verb)
        await asyncio.sleep(0)
        if self.steps:
            step = self.steps.pop(0)
            if step == HANG:
                await asyncio.Event().wait()
            raise step
        if self.failing is not None:
            raise self.failing

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        await self._call("get")
        if self.lease is None:
            raise ApiError(404, "NotFound", "leases.coordination.k8s.io not found")
        answer = copy.deepcopy(self.lease)
        await asyncio.sleep(self.response_delay)
        return answer

    async def get_or_none(self, resource: Resource, namespace: str | None,
                          name: str) -> JSON | None:
        try:
            return await self.get(resource, namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        await self._call("create")
        if self.lease is not None:
            raise ApiError(409, "AlreadyExists", "already exists")
        self.write(body["spec"])
        answer = copy.deepcopy(self.lease)
        await asyncio.sleep(self.response_delay)
        return answer  # type: ignore[return-value]

    async def put(self, resource: Resource, namespace: str | None, name: str,
                  body: JSON, *, subresource: str = "") -> JSON:
        assert not subresource, "a Lease has no subresource"
        await self._call("put")
        if self.before_put is not None:
            self.before_put()
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        self.write(body["spec"])
        answer = copy.deepcopy(self.lease)
        await asyncio.sleep(self.response_delay)
        return answer


def settings(identity: str = "me", **durations: float) -> LeaderElectionSettings:
    return LeaderElectionSettings(
        namespace="ns", name=f"lease-{uuid.uuid4().hex[:8]}", identity=identity,
        lease_duration=durations.get("lease", LEASE),
        renew_deadline=durations.get("renew", RENEW),
        retry_period=durations.get("retry", RETRY))


def elector(api: LeaseApi, s: LeaderElectionSettings | None = None) -> LeaderElector:
    return LeaderElector(api, s or settings())  # type: ignore[arg-type]


def now() -> float:
    return asyncio.get_running_loop().time()


async def timed(awaitable: Awaitable[Any]) -> float:
    """Seconds (virtual) the awaitable took."""
    start = now()
    await awaitable
    return now() - start


async def renewing(api: LeaseApi, holder: str, until: float, renew_time: str) -> float:
    """Another holder renewing every RETRY seconds until `until`; returns the time of
    its last renewal. `renew_time` is what it writes (its clock may be anything)."""
    transitions = 0
    while True:
        transitions += 1
        api.write({"holderIdentity": holder, "leaseDurationSeconds": int(LEASE),
                   "renewTime": f"{renew_time}-{transitions}"})
        last = now()
        if last + RETRY > until:
            return last
        await asyncio.sleep(RETRY)


def test_a_free_lease_is_taken_at_once() -> None:
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        assert await timed(e.acquire()) == 0
        assert api.spec()["holderIdentity"] == "me"
        assert api.spec()["leaseTransitions"] == 0
        assert api.spec()["leaseDurationSeconds"] == 15
        assert metric("leader_election_master_status", name=e.s.name) == 1

    run(main())


def test_a_released_lease_is_taken_at_once_and_counts_a_transition() -> None:
    async def main() -> None:
        api = LeaseApi({"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 3})
        assert await timed(elector(api).acquire()) == 0
        assert api.spec()["leaseTransitions"] == 4 and api.spec()["acquireTime"]

    run(main())


@pytest.mark.parametrize("holder_clock", ["2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z"])
def test_a_held_lease_is_taken_only_lease_duration_after_its_last_change(
    holder_clock: str,
) -> None:
    # The holder's timestamps (skewed into the past or the future) are never compared
    # with our clock: only when we saw the record change.
    async def main() -> None:
        api = LeaseApi()
        other = asyncio.create_task(renewing(api, "other", now() + 9.0, holder_clock))
        await asyncio.sleep(0)
        acquiring = asyncio.create_task(elector(api).acquire())
        last_renewal = await other
        await acquiring
        acquired_at = now()
        assert api.spec()["holderIdentity"] == "me"
        # Seen at most one retry period late, tried every retry period.
        assert LEASE <= acquired_at - last_renewal <= LEASE + 2 * RETRY

    run(main())


def test_the_holders_own_lease_duration_is_what_we_wait() -> None:
    async def main() -> None:
        api = LeaseApi({"holderIdentity": "other", "leaseDurationSeconds": 40})
        waited = await timed(elector(api).acquire())
        assert 40 <= waited <= 40 + RETRY

    run(main())


def test_of_two_candidates_only_one_takes_a_free_lease() -> None:
    async def main() -> None:
        api = LeaseApi()
        leaders: list[str] = []

        async def lead(identity: str) -> None:
            e = elector(api, settings(identity))
            await e.acquire()
            leaders.append(identity)
            await e.hold()

        tasks = [asyncio.create_task(lead("a")), asyncio.create_task(lead("b"))]
        await asyncio.sleep(10 * LEASE)  # a leader that renews is never taken over
        assert len(leaders) == 1 and api.spec()["holderIdentity"] == leaders[0]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(main())


def test_losing_a_put_race_to_another_candidate_is_not_an_error() -> None:
    async def main() -> None:
        api = LeaseApi({"holderIdentity": "", "leaseTransitions": 0})

        def other_wins() -> None:
            api.before_put = None
            api.write({"holderIdentity": "other", "leaseDurationSeconds": 15, "renewTime": "t"})

        api.before_put = other_wins
        waited = await timed(elector(api).acquire())
        assert waited >= LEASE  # lost the race, then waited out the winner (who never renewed)
        assert api.spec()["holderIdentity"] == "me"

    run(main())


def test_renewals_keep_the_lease() -> None:
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        await e.acquire()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(e.hold(), 60)
        assert api.spec()["holderIdentity"] == "me"
        assert api.calls.count("put") >= 60 / RETRY - 1

    run(main())


def test_the_leader_loses_once_it_cannot_renew_within_the_renew_deadline() -> None:
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        await e.acquire()
        renewed_at = now()
        api.failing = ApiError(503, "ServiceUnavailable", "etcd unavailable")
        with pytest.raises(LeadershipLost):
            await e.hold()
        assert RENEW <= now() - renewed_at <= RENEW + RETRY
        assert metric("leader_election_master_status", name=e.s.name) == 0

    run(main())


def test_a_stalled_renewal_is_cancelled_at_the_renew_deadline() -> None:
    # One renewal hangs (a half-open connection): the leader must not wait out the
    # request; it gives up renew_deadline after it sent its last successful write,
    # which is before any standby may take over (lease_duration after that write).
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        await e.acquire()
        hold = asyncio.create_task(e.hold())
        await asyncio.sleep(3 * RETRY + 0.5)  # three renewals
        last_sent = api.writes[-1][0]
        api.steps = [HANG]
        with pytest.raises(LeadershipLost, match="within"):
            await hold
        assert now() == last_sent + RENEW < last_sent + LEASE
        assert api.calls.count("put") == 4  # the fourth renewal hung and was cancelled

    run(main())


def test_a_renewal_that_stalls_after_the_server_wrote_it_still_loses_in_time() -> None:
    # The worst case for the leader: its PUT lands, but the answer never comes.
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        await e.acquire()
        acquired_at = now()
        api.response_delay = 3600.0
        with pytest.raises(LeadershipLost):
            await e.hold()
        assert now() == acquired_at + RENEW
        # The standby's clock starts at the last write it could see: the hung renewal.
        assert now() < api.writes[-1][0] + LEASE

    run(main())


@pytest.mark.parametrize(("delay", "keeps"), [(1.0, True), (4.5, True), (5.5, False)])
def test_slow_answers_keep_the_lease_while_two_round_trips_fit_the_renew_deadline(
    delay: float, keeps: bool,
) -> None:
    # A renewal is sent only after the previous one answered, and the deadline runs
    # from when that one was sent: so it holds while 2 x delay < renew_deadline.
    async def main() -> None:
        api = LeaseApi()
        api.response_delay = delay
        e = elector(api)
        await e.acquire()
        hold = asyncio.create_task(e.hold())
        lost_at = None
        try:
            await asyncio.wait_for(asyncio.shield(hold), 100.0)
        except LeadershipLost:
            lost_at = now()
        except TimeoutError:
            hold.cancel()
        assert (lost_at is None) is keeps
        # While it led, a standby never could have: its last write (which a standby
        # would time from) was always less than lease_duration ago.
        led_until = now() if lost_at is None else lost_at
        times = [t for t, _ in api.writes] + [led_until]
        assert max(b - a for a, b in itertools.pairwise(times)) < LEASE

    run(main())


def test_renewing_costs_one_put_and_seeing_another_holder_loses_at_once() -> None:
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        await e.acquire()
        api.calls.clear()
        hold = asyncio.create_task(e.hold())
        await asyncio.sleep(5 * RETRY + 0.5)
        assert api.calls == ["put"] * 5
        api.write({"holderIdentity": "other", "leaseDurationSeconds": 15, "renewTime": "t"})
        taken_at = now()
        with pytest.raises(LeadershipLost, match="held by other"):
            await hold
        assert now() - taken_at <= RETRY  # the next renewal, not the renew deadline
        assert metric("leader_election_master_status", name=e.s.name) == 0

    run(main())


def test_a_fractional_lease_duration_is_written_rounded_up() -> None:
    async def main() -> None:
        api = LeaseApi()
        await elector(api, settings(lease=4.5, renew=3.0, retry=1.0)).acquire()
        assert api.spec()["leaseDurationSeconds"] == 5  # a standby waits >= 4.5 s

    run(main())


GARBAGE: list[tuple[str, Any, bool]] = [
    # (what, spec, is it held by someone else)
    ("no spec", None, False),
    ("empty spec", {}, False),
    ("spec a list", [1, 2], False),
    ("spec a string", "held", False),
    ("holder null", {"holderIdentity": None, "leaseTransitions": 2}, False),
    ("holder a number", {"holderIdentity": 42, "renewTime": "yesterday"}, True),
    ("holder an object", {"holderIdentity": {"name": "x"}}, True),
    ("duration a string", {"holderIdentity": "other", "leaseDurationSeconds": "long"}, True),
    ("duration negative", {"holderIdentity": "other", "leaseDurationSeconds": -5}, True),
    ("transitions a string", {"holderIdentity": "", "leaseTransitions": "many"}, False),
]


@pytest.mark.parametrize(("what", "spec", "held"), GARBAGE, ids=[g[0] for g in GARBAGE])
def test_a_lease_of_any_shape_is_handled_without_crashing(what: str, spec: Any,
                                                          held: bool) -> None:
    async def main() -> None:
        api = LeaseApi(spec, exists=True)
        waited = await timed(elector(api).acquire())
        # A holder we cannot read is someone else: waited out for our own lease duration.
        assert (LEASE <= waited <= LEASE + RETRY) if held else waited == 0
        assert api.spec()["holderIdentity"] == "me"
        assert isinstance(api.spec()["leaseTransitions"], int)

    run(main())


def test_a_lease_that_is_not_an_object_is_retried_until_it_is() -> None:
    async def main() -> None:
        api = LeaseApi({"holderIdentity": ""})
        good = api.get
        answers: list[Any] = [[], "text"]

        async def get(resource: Resource, namespace: str | None, name: str) -> Any:
            return answers.pop(0) if answers else await good(resource, namespace, name)

        api.get = get  # type: ignore[method-assign]
        assert await timed(elector(api).acquire()) == 2 * RETRY

    run(main())


def test_release_frees_our_lease_but_never_anothers() -> None:
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        await e.acquire()
        await e.release()
        assert api.spec()["holderIdentity"] == "" and api.spec()["leaseDurationSeconds"] == 1

        api2 = LeaseApi()
        e2 = elector(api2)
        await e2.acquire()
        api2.write({"holderIdentity": "other", "leaseDurationSeconds": 15})  # taken over
        await e2.release()  # a stale PUT: 409, logged, not raised
        assert api2.spec()["holderIdentity"] == "other"

    run(main())


def test_release_after_a_renewal_cancelled_in_flight_still_frees_the_lease() -> None:
    """Seen in CI: a stop cancels hold() while a renewal has been written but not yet
    answered, so our copy of the Lease is one resourceVersion behind. The release PUT
    meets a 409; it reads the Lease again, finds itself the holder and frees it."""
    async def main() -> None:
        api = LeaseApi()
        e = elector(api)
        await e.acquire()
        api.response_delay = RETRY
        holding = asyncio.create_task(e.hold())
        writes = len(api.writes)
        await asyncio.sleep(RETRY * 1.5)  # renewed at RETRY, answered at 2 * RETRY
        assert len(api.writes) == writes + 1
        holding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holding
        api.response_delay = 0.0
        await e.release()
        assert api.calls[-3:] == ["put", "get", "put"]
        assert api.spec()["holderIdentity"] == "" and api.spec()["leaseDurationSeconds"] == 1

    run(main())


def test_lease_api_fake_matches_the_real_signatures() -> None:
    import inspect

    for name in ("get", "get_or_none", "create", "put"):
        real = list(inspect.signature(getattr(Kube, name)).parameters)
        assert real == list(inspect.signature(getattr(LeaseApi, name)).parameters), name
    assert LEASES.plural == "leases"

"""Shipwright v0.20.13's own integration suite, run against our controller (issue 25).

The suite is `test/integration` of github.com/shipwright-io/build (119 Ginkgo specs:
Builds to BuildRuns, Git and secrets validation, TaskRun generation, BuildRun status,
cleanup, ServiceAccounts, strategies, cluster strategies, vulnerability scan,
PipelineRuns), compiled by hack/shipwright-it/build (`make shipwright-it`, in setup)
from the module cache with one file replaced: its StartBuildControllers starts our
controller (`python -m controller`, every namespace, no leader election, no metrics)
as a subprocess instead of Shipwright's manager, its output in the buffer the suite
prints for a failed spec, and stops it (SIGTERM) when the suite ends.

It runs on the session's stack (tests/conftest.py: real Tekton, our CRDs, kwok as the
kubelet). Each pod the suite causes gets the fate its step commands determine
(devtools/cluster/fates.py step_fate: a step `false` exits 1, `sleep 30s` runs 30 s, and
any other command, kaniko, buildah or Shipwright's git step, runs 5 s and exits 0, the
stand-in for a tool's work; hack/kwok/stages/README.md). The suite makes its own
namespaces (`test-build-N`), strategies and cluster strategies; cluster strategies it
leaves behind are deleted after. It reads only $KUBECONFIG (the admin's here) and
installs no CRDs. Its conversion webhook (utils.StartBuildWebhook, BeforeSuite; our CRDs
have one version and no conversion, so nothing calls it) listens on :30443 with TLS from
/tmp/server-{cert,key}.pem, fixed paths: so the suite runs in a network namespace of its
own (devtools/cluster/netns.py) that reaches the API server's port and the host's DNS
and nothing else, and two runs on one machine do not collide.

Every spec passes, or is in CANNOT_PASS with why and the failure it shows (a substring
of its failure message in Ginkgo's JSON report); the test fails every way the table
can be wrong: a spec failing that is not listed, a listed spec failing with another
message, and a listed spec that passes. Only the specs that need github.com are skipped
by name (--ginkgo.skip), while it does not answer, and must be reported skipped.
The specs that need a step that really runs and can have it here (ON_REAL_NODE: the
error-result one) run first, in a run of their own on the session stack's real node
(devtools/cluster/realnode.py): the pod webhook puts each pod there (place_pod) with
github.com/shipwright-io/sample-go cloned from the node's Git server (serve_github), and
the node serves their alpine:latest (realnode.STAND_INS). Where the machine has no real
node they run on kwok with the rest, held to their entries in ON_REAL_NODE.
The suite runs twice, as Shipwright splits it: the specs not labelled PipelineRun, then
those that are, with our controller started with BUILDRUN_EXECUTOR=PipelineRun.

Time: a spec waits on the suite's 3 s polls, and its namespace takes 6 s of them to go
(kube-controller-manager's namespace controller starts on a deleted namespace only after
a fixed 5 s, BENCHMARKS-journal.md "Why a namespace takes 6 s of Shipwright's suite"), so
the specs not labelled PipelineRun run in SHARDS runs at once, each on a stack of its own
(the session's, and one started here) with a controller of its own: a spec sees one
cluster and one controller, as in Shipwright's CI, and the whole takes about half as
long. Each run is the suite's binary with
--ginkgo.focus naming its share of the specs (round robin over their sorted names,
from a dry run); the reports are merged.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from controller.runtime.kube import Kube
from controller.shipwright.resources import CLUSTERBUILDSTRATEGIES
from devtools.cluster import certs, netns, realbuilds
from devtools.cluster.fates import FateWebhook
from devtools.cluster.localcluster import REPO
from devtools.cluster.polling import transient, wait_until
from devtools.cluster.processes import die_with_parent
from devtools.cluster.realnode import JSON, NodeUnavailable, RealNode, place_pod
from devtools.cluster.stack import TektonStack
from tests.conftest import STRICT

pytestmark = [pytest.mark.cluster, pytest.mark.shipwright_it]

SPECS = 119
# A spec takes 9-35 s (each waits for its namespace to go, 6 s); one that fails waiting
# for a state waits out the suite's fixed 300 s (TestBuild.TimeOut). A whole run takes
# about a quarter of an hour (BENCHMARKS.md); this bounds a hung one.
SUITE_TIMEOUT = 60 * 60
# How many runs of the suite share the specs not labelled PipelineRun, each on a stack of
# its own, at once (module docstring). 1 where there are no network namespaces: each run
# binds :30443 on the host.
SHARDS = 3
# The suite's conversion webhook serves TLS from these fixed paths.
WEBHOOK_CERT, WEBHOOK_KEY = Path("/tmp/server-cert.pem"), Path("/tmp/server-key.pem")
GITHUB = ("github.com", 443)
# The Ginkgo label of the specs that need BuildRuns run as PipelineRuns.
PIPELINERUN = "PipelineRun"


class Cannot(NamedTuple):
    """Why a spec cannot pass here, and `failure`: a substring of the message its failure
    has in Ginkgo's JSON report (Failure.Message, and a panic's value), so a listed spec
    failing for another reason fails the test. "" for a spec skipped by name.
    `may_pass`: a race whose outcome the machine's timing decides (`why` says which), so
    the spec passes or fails with `failure`, and either is accepted."""
    why: str
    failure: str = ""
    may_pass: bool = False


NEEDS_GITHUB = ("verify.repository: asks github.com, which this machine cannot reach "
                "(run, and expected to pass, when it answers)")
_KWOK = ("on kwok, which runs no container (a step's fate comes from its command, "
         "hack/kwok/stages/README: any tool's step runs 5 s and exits 0), ")
# A BuildRun's Succeeded condition True where the spec wants False, as Gomega words it.
SUCCEEDED = "<v1.ConditionStatus>: True\nto equal\n    <v1.ConditionStatus>: False"
VULNERABILITY_SCAN = (
    "its strategy runs gcr.io/go-containerregistry/crane:v0.21.5 to pull "
    "ghcr.io/shipwright-io/shipwright-samples/node:12, both only on public registries, and "
    "the scan is Shipwright's image-processing running trivy, which Shipwright's image "
    "downloads from GitHub, with trivy's vulnerability DB from ghcr.io: none of them can be "
    "had here, so it runs " + _KWOK + "where the build succeeds with nothing scanned")
# Each spec of the suite that cannot pass here, by its full text: what is missing here,
# and the failure it shows now. Every other spec must pass. From the whole runs in
# BENCHMARKS-journal.md ("The suite with the real node").
CANNOT_PASS: dict[str, Cannot] = {
    "Integration tests Build and referenced Source url when the build source url protocol "
    "is http and the verify annotation is true should validate source url successfully":
        Cannot(NEEDS_GITHUB),
    "Integration tests Build and referenced Source url when the build source url protocol "
    "is https and the verify annotation is true should validate source url successfully":
        Cannot(NEEDS_GITHUB),
    "Integration tests BuildRuns and TaskRuns when buildrun uses conditions when condition "
    "status is false reflects a failed reason": Cannot(
        "its strategy's image gcr.io/kaniko-project/executor:v1.24.0 exists only on a "
        "public registry and kaniko cannot be built here (the Go module proxy answers 403 "
        "for github.com/GoogleContainerTools/kaniko), so it runs " + _KWOK + "where the "
        "misspelled flag is not refused: the BuildRun succeeds and the spec's read of its "
        "failureDetails panics", "invalid memory address or nil pointer dereference"),
    "Checking BuildRun Status fields Verifying BuildRun status source results should have "
    "the correct source timestamp for Git sources": Cannot(
        "it wants the time (1619426578) of the commit tagged v0.1.0 in "
        "github.com/shipwright-io/sample-go, which only GitHub has and this machine cannot "
        "reach (the stack's Git server serves a stand-in of that repository, not that "
        "commit), so it runs " + _KWOK + "where the git step writes no result",
        "<*v1beta1.SourceResult | 0x0>: nil"),
    "Checking BuildRun Status fields Verifying BuildRun status source results should have "
    "the correct source timestamp for Bundle sources": Cannot(
        "its bundle is ghcr.io/shipwright-io/sample-go/source-bundle pinned by digest "
        "(sha256:9a5e264c...), only on a public registry, and no image made here can have "
        "that digest (it is a hash of the content), so it runs " + _KWOK + "where the bundle "
        "step writes no result", "<*v1beta1.SourceResult | 0x0>: nil"),
    "Vulnerability scan tests when a build with vulnerability scan options is defined "
    "should fail the builRun with a Reason": Cannot(VULNERABILITY_SCAN, SUCCEEDED),
    "Vulnerability scan tests When a buildrun with vulnerability scan is defined should "
    "fail the builRun with a Reason": Cannot(VULNERABILITY_SCAN, SUCCEEDED),
    "Vulnerability scan tests When both build and buildrun with vulnerability scan is "
    "defined should override the vulnerability settings from builRun":
        Cannot(VULNERABILITY_SCAN, SUCCEEDED),
    "Vulnerability scan tests When a standalone buildrun with vulnerability scan is "
    "defined should fail the builRun with a Reason": Cannot(VULNERABILITY_SCAN, SUCCEEDED),
}
# The specs that need a step that really runs and can have it here: they run in a run of
# their own on the session stack's real node (run_and_check), every pod they make put
# there by the fate webhook's patch (real_node_patch). Each with the entry it is held to
# where this machine has no real node (they then run on kwok with the rest).
ON_REAL_NODE: dict[str, Cannot] = {
    # BuildStrategyWithErrorResult: alpine:latest's sh writes the error results and
    # exits 1; its Build clones github.com/shipwright-io/sample-go first.
    "Integration tests BuildStrategies and TaskRuns buildstrategy with defined parameters "
    "when a taskrun fails with an error result surfaces the result to the buildrun": Cannot(
        "no real node here (TektonStack.real_node_unavailable), so it runs " + _KWOK
        + "where no step writes its error results", "<*v1beta1.FailureDetails | 0x0>: nil"),
}
# The repositories on github.com that the suite's specs on the real node clone, served by
# the real node's Git server instead (a stand-in: Shipwright's sample's layout,
# devtools.cluster.realbuilds.sample_files).
GITHUB_STAND_INS = ("shipwright-io/sample-go",)


def github_answers(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to github.com:443 opens (DNS included)."""
    try:
        socket.create_connection(GITHUB, timeout=timeout).close()
    except OSError:
        return False
    return True


def suite_binary() -> Path:
    """The compiled suite, from the cache `make shipwright-it` filled (about a second)."""
    out = subprocess.run([str(REPO / "hack" / "shipwright-it" / "build")], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1]) / "shipwright-it.test"


def spec_name(spec: dict[str, Any]) -> str:
    return " ".join([*(spec.get("ContainerHierarchyTexts") or []), spec["LeafNodeText"]])


def labels(spec: dict[str, Any]) -> set[str]:
    """A spec's Ginkgo labels, its containers' included."""
    return {*(spec.get("LeafNodeLabels") or []),
            *(label for level in spec.get("ContainerHierarchyLabels") or [] for label in level)}


class Spec(NamedTuple):
    """One spec in Ginkgo's JSON report: its state ("passed", "failed", "panicked",
    "timedout", "skipped", ...), labels, failure message (a panic's value after it; ""
    when it did not fail) and seconds run."""
    state: str
    labels: set[str]
    failure: str
    seconds: float


def results(report_path: Path) -> tuple[int, dict[str, Spec]]:
    """(the random seed, spec name -> Spec) from Ginkgo's JSON report."""
    [suite] = json.loads(report_path.read_text())
    specs = {}
    for s in suite["SpecReports"]:
        if s.get("LeafNodeType") != "It":
            continue
        failure = s.get("Failure") or {}
        message = "\n".join(filter(None, [failure.get("Message"),
                                          failure.get("ForwardedPanic")]))
        specs[spec_name(s)] = Spec(s["State"], labels(s), message, s.get("RunTime", 0) / 1e9)
    return suite["SuiteConfig"]["RandomSeed"], specs


def names_pattern(names: list[str]) -> str:
    """A --ginkgo.focus or --ginkgo.skip regular expression matching exactly these full
    spec texts. Ginkgo matches it against "<suite description> <spec text>"
    (internal/focus.go), so it is anchored at the end and at the blank before the
    spec's text."""
    return "^Integration Suite (" + "|".join(re.escape(n) for n in names) + ")$"


def dry_run(binary: Path, label_filter: str, where: Path) -> list[str]:
    """The full texts of the specs `label_filter` selects, from a dry run of the suite
    (no cluster, no BeforeSuite: about 0.05 s)."""
    report = where / "dry-run.json"
    subprocess.run([str(binary), "--ginkgo.dry-run", f"--ginkgo.json-report={report}",
                    "--ginkgo.no-color", f"--ginkgo.label-filter={label_filter}"],
                   check=True, stdout=subprocess.DEVNULL, cwd=where)
    return sorted(name for name, spec in results(report)[1].items()
                  if spec.state == "passed")


def shares(names: list[str], runs: int) -> list[list[str]]:
    """`names` dealt round robin, in sorted order, to at most `runs` runs; none empty."""
    ordered = sorted(names)
    return [share for share in (ordered[i::runs] for i in range(runs)) if share]


def mkdirs(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def ensure_webhook_certs() -> None:
    """A key pair at the suite's fixed paths; one already there that loads is kept (a run
    elsewhere on the machine may be serving it), else both are replaced atomically."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            WEBHOOK_CERT, WEBHOOK_KEY)
        return
    except (OSError, ssl.SSLError):
        pass
    pair = certs.issue_serving_cert(certs.make_ca(), ["localhost", "127.0.0.1"])
    for path, data in ((WEBHOOK_KEY, pair.key_pem), (WEBHOOK_CERT, pair.cert_pem)):
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(path)


async def run_suite(argv: list[str], env: dict[str, str], log: Path) -> int:
    """Runs the suite in a process group of its own; killed, with the controller it
    started, if it outlives SUITE_TIMEOUT + 2 minutes, or if this process dies (the
    netns launcher, the suite and the controller each die with their parent)."""
    with log.open("wb") as out:
        suite = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=log.parent, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)
        try:
            return await asyncio.wait_for(suite.wait(), SUITE_TIMEOUT + 120)
        finally:
            if suite.returncode is None:
                os.killpg(suite.pid, signal.SIGKILL)
                await suite.wait()


async def cluster_strategies(kube: Kube) -> set[str]:
    """The cluster strategies' names. A fresh stack's API server may answer 429 "storage
    is (re)initializing" for the CRD for a moment (seen once, right after start-up), so
    transient errors are asked past for up to a minute."""
    async def names() -> tuple[set[str]] | None:  # a tuple: wait_until wants it truthy
        try:
            listed = await kube.list(CLUSTERBUILDSTRATEGIES, None)
        except Exception as exc:  # transient() decides; anything else is raised
            if transient(exc):
                return None
            raise
        return ({item["metadata"]["name"] for item in listed["items"]},)

    found = await wait_until(names, timeout=60, interval=1)
    assert found is not None, "cluster strategies could not be listed for a minute"
    return set(found[0])


class Run(NamedTuple):
    """One run of the suite's binary: the specs it was given, where its log and report
    are, and how long it took (its stack's start-up not included)."""
    names: list[str]
    folder: Path
    seconds: float


def real_node_patch(node: RealNode) -> Callable[[JSON], list[JSON]]:
    """The pod webhook's patch for the specs run on the real node: each pod placed there
    (realnode.place_pod: the suite's Builds ask for no node) and GITHUB_STAND_INS fetched
    from its Git server (RealNode.serve_github), each made there on first use."""
    for name in GITHUB_STAND_INS:
        if not (node.git_root / f"{name}.git").exists():
            node.create_repository(name, realbuilds.sample_files(node))
    return lambda pod: place_pod(pod) + node.serve_github(pod)


async def run_share(stack: TektonStack, binary: Path, names: list[str], label_filter: str,
                    env: dict[str, str], folder: Path, isolated: bool,
                    patch: Callable[[JSON], list[JSON]] | None = None) -> Run:
    """Runs the suite's binary on `stack` for the specs `names` (--ginkgo.focus), with our
    controller and `env` added to its environment, with the step fates on `stack` (or,
    given `patch`, that patch on each pod instead); in a network namespace of its own
    when `isolated`."""
    kubeconfig = str(stack.cluster.kubeconfig)
    controller = (f"{sys.executable} -m controller --kubeconfig {kubeconfig} "
                  "--metrics-bind-address 0 --health-probe-bind-address 0 "
                  "--shutdown-grace-period 5 --log-format text")
    env = {**os.environ, "KUBECONFIG": kubeconfig, "SHIPWRIGHT_IT_CONTROLLER": controller,
           "PYTHONPATH": str(REPO), **env}
    argv = [str(binary), f"--ginkgo.json-report={folder / 'report.json'}",
            "--ginkgo.no-color", "--ginkgo.randomize-all",
            f"--ginkgo.timeout={SUITE_TIMEOUT}s", f"--ginkgo.label-filter={label_filter}",
            f"--ginkgo.focus={names_pattern(names)}"]
    started = time.monotonic()
    port = int(stack.cluster.url.rsplit(":", 1)[1])
    async with FateWebhook(stack.cluster, lambda namespace, buildrun: None,
                           name="steps.buildrun-controller.test", from_steps=patch is None,
                           patch=patch):
        if isolated:
            async with netns.Gateway(folder / "netns", [port]) as gateway:
                await run_suite(gateway.command(argv), env, folder / "suite.log")
        else:  # no namespaces here: the suite binds :30443 on the host
            await run_suite(argv, env, folder / "suite.log")
    return Run(names, folder, time.monotonic() - started)


async def run_on_a_stack_of_its_own(binary: Path, names: list[str], label_filter: str,
                                    env: dict[str, str], folder: Path) -> Run:
    """run_share on a TektonStack started for it (as the session's: tests/conftest.py),
    stopped after."""
    async with TektonStack(folder / "stack", apiserver_args=STRICT) as stack:
        return await run_share(stack, binary, names, label_filter, env, folder, True)


async def run_and_check(stack: TektonStack, kube: Kube, tmp_path: Path, pipelineruns: bool,
                        env: dict[str, str], runs: int = 1) -> None:
    """Runs the suite's specs labelled PipelineRun (`pipelineruns`) or all the others,
    shared among `runs` runs at once (the first on the session's `stack`, each other on
    a stack of its own), with `env` added to the controller's environment, and holds
    the merged results to CANNOT_PASS. The specs in ON_REAL_NODE run first, in a run of
    their own on the session stack's real node (where there is none, with the others, held
    to their entries there)."""
    binary = suite_binary()
    ensure_webhook_certs()
    label_filter = PIPELINERUN if pipelineruns else f"!{PIPELINERUN}"
    selection = dry_run(binary, label_filter, tmp_path)
    reachable = github_answers()
    skipped = sorted(name for name, cannot in CANNOT_PASS.items()
                     if cannot.why == NEEDS_GITHUB and not reachable and name in selection)
    isolated = netns.available() is None
    if not isolated:
        runs = 1
    table, real = CANNOT_PASS, sorted(name for name in selection if name in ON_REAL_NODE)
    node: RealNode | None = None
    if real:
        try:
            node = await stack.real_node()
        except NodeUnavailable as exc:
            print(f"\nno real node ({exc}): {len(real)} spec(s) run on kwok, held to "
                  "ON_REAL_NODE's entries")
            table, real = CANNOT_PASS | ON_REAL_NODE, []
    dealt = shares([name for name in selection if name not in skipped and name not in real],
                   runs)
    for i in range(len(dealt)):
        mkdirs(tmp_path / f"run{i}")

    async def on_the_sessions_stack() -> list[Run]:
        """The real node's run (a minute), then run0: the other runs start their stacks
        meanwhile."""
        done = []
        if node is not None:
            done.append(await run_share(
                stack, binary, real, label_filter, env | node.images.shipwright_env(),
                mkdirs(tmp_path / "real"), isolated, real_node_patch(node)))
        return [*done, await run_share(stack, binary, dealt[0], label_filter, env,
                                       tmp_path / "run0", isolated)]

    async def on_a_stack_of_its_own(names: list[str], folder: Path) -> list[Run]:
        return [await run_on_a_stack_of_its_own(binary, names, label_filter, env, folder)]

    before = await cluster_strategies(kube)
    started = time.monotonic()
    async with asyncio.TaskGroup() as group:  # one failing stops the others
        tasks = [group.create_task(on_the_sessions_stack())]
        tasks += [group.create_task(on_a_stack_of_its_own(names, tmp_path / f"run{i}"))
                  for i, names in enumerate(dealt[1:], 1)]
    done = [run for task in tasks for run in task.result()]
    wall = time.monotonic() - started
    for name in await cluster_strategies(kube) - before:  # the suite's, left behind
        await kube.delete(CLUSTERBUILDSTRATEGIES, None, name)

    ran: dict[str, Spec] = {}
    seeds = []
    for run in done:
        report = run.folder / "report.json"
        assert report.exists(), (run.folder / "suite.log").read_text()[-3000:]
        seed, reported = results(report)
        seeds.append(f"{run.folder.name}: seed {seed}, {run.seconds:.0f} s")
        assert len(reported) == SPECS, sorted(reported)
        assert set(table) <= set(reported), set(table) - set(reported)
        assert {spec.state for name, spec in reported.items() if name not in run.names} <= {
            "skipped"}, f"{run.folder}: ran a spec it was not given"
        assert {name: reported[name].state for name in skipped} == dict.fromkeys(
            skipped, "skipped")
        ran |= {name: reported[name] for name in run.names}
    where = (f"(rerun one in the same order with --ginkgo.seed and its --ginkgo.focus; "
             f"{'; '.join(seeds)}; logs and reports in {tmp_path}/run*)")
    counts = collections.Counter(spec.state for spec in ran.values())
    print(f"\nShipwright's integration suite, --ginkgo.label-filter={label_filter}: "
          f"{wall:.0f} s in {len(done)} run(s), {len(tasks)} at once, {len(selection)} specs: "
          f"{dict(counts)}, {len(skipped)} skipped by name {where}")
    assert sorted(set(selection) - set(ran) - set(skipped)) == [], "specs no run was given"
    assert {what: names for what, names in verdict(ran, table).items() if names} == {}, where


def verdict(ran: dict[str, Spec], table: dict[str, Cannot] | None = None
            ) -> dict[str, list[str]]:
    """What is wrong with the specs `ran` (by name) against `table` (CANNOT_PASS): each
    must pass unless listed (NEEDS_GITHUB ones must pass when run); a listed one must
    fail, with its failure in its message, or may pass too if it races."""
    table = CANNOT_PASS if table is None else table
    failed = {name for name, spec in ran.items() if spec.state != "passed"}
    listed = {name for name, cannot in table.items() if cannot.why != NEEDS_GITHUB}
    racing = {name for name, cannot in table.items() if cannot.may_pass}
    return {
        "skipped, though a run was given it": sorted(
            name for name, spec in ran.items() if spec.state == "skipped"),
        "failing, not in CANNOT_PASS": sorted(
            f"{name}: {ran[name].failure[:300]}" for name in failed - listed),
        "in CANNOT_PASS, passing now": sorted((listed & set(ran)) - failed - racing),
        "in CANNOT_PASS, failing for another reason": sorted(
            f"{name}: {ran[name].failure[:300]}" for name in failed & listed
            if table[name].failure not in ran[name].failure),
    }


def test_verdict_holds_each_spec_to_its_entry() -> None:
    """The table is checked every way it can be wrong (no suite run: a few ms)."""
    table = {"a": Cannot("why a", "boom"), "b": Cannot("why b", "late", may_pass=True),
             "g": Cannot(NEEDS_GITHUB)}

    def spec(state: str, failure: str = "") -> Spec:
        return Spec(state, set(), failure, 1.0)

    good = {"a": spec("failed", "Expected\nboom!"), "b": spec("passed"), "g": spec("passed"),
            "z": spec("passed")}
    assert not any(verdict(good, table).values())
    assert not any(verdict(good | {"b": spec("failed", "too late")}, table).values())
    assert not any(verdict(good | {"a": spec("panicked", "Test Panicked\nboom")},
                           table).values())
    assert verdict(good | {"z": spec("failed", "x")}, table)[
        "failing, not in CANNOT_PASS"] == ["z: x"]
    assert verdict(good | {"g": spec("failed", "no such host")}, table)[
        "failing, not in CANNOT_PASS"] == ["g: no such host"]
    assert verdict(good | {"a": spec("passed")}, table)["in CANNOT_PASS, passing now"] == ["a"]
    assert verdict(good | {"a": spec("failed", "other")}, table)[
        "in CANNOT_PASS, failing for another reason"] == ["a: other"]
    assert verdict(good | {"b": spec("failed", "other")}, table)[
        "in CANNOT_PASS, failing for another reason"] == ["b: other"]
    assert verdict(good | {"z": spec("skipped")}, table)[
        "skipped, though a run was given it"] == ["z"]
    assert all(cannot.failure for cannot in CANNOT_PASS.values()
               if cannot.why != NEEDS_GITHUB), "a listed spec names the failure it shows"


@pytest.mark.timeout(SUITE_TIMEOUT + 300)
async def test_shipwrights_integration_suite_against_ours(stack: TektonStack, kube: Kube,
                                                          tmp_path: Path) -> None:
    """Every spec but those labelled PipelineRun, as Shipwright's `make test-integration`
    runs them (--label-filter='!PipelineRun'), against our controller as it starts."""
    await run_and_check(stack, kube, tmp_path, pipelineruns=False, env={}, runs=SHARDS)


@pytest.mark.timeout(SUITE_TIMEOUT + 300)
async def test_shipwrights_pipelinerun_specs_against_ours(stack: TektonStack, kube: Kube,
                                                         tmp_path: Path) -> None:
    """The specs labelled PipelineRun, against our controller started with Shipwright's
    BUILDRUN_EXECUTOR=PipelineRun (pkg/config: BuildRuns run as PipelineRuns)."""
    await run_and_check(stack, kube, tmp_path, pipelineruns=True,
                        env={"BUILDRUN_EXECUTOR": "PipelineRun"})

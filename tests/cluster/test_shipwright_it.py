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
(devtools/cluster/fates.py step_fate: a step `false` exits 1, `sleep 30s` runs 30 s; any
other command, kaniko or buildah included, exits 0 at once, kwok's default). The suite
makes its own namespaces (`test-build-N`), strategies and cluster strategies; cluster
strategies it leaves behind are deleted after. It reads only $KUBECONFIG (the admin's
here) and installs no CRDs. Its conversion webhook (utils.StartBuildWebhook,
BeforeSuite; our CRDs never call it) listens on :30443 with TLS from
/tmp/server-{cert,key}.pem, fixed paths: so the suite runs in a network namespace of its
own (devtools/cluster/netns.py) that reaches the API server's port and the host's DNS
and nothing else, and two runs on one machine do not collide.

Every spec passes, or is in CANNOT_PASS with why; the test fails both ways (a spec
failing that is not listed, and a listed spec that passes), so the table is kept in
step with the suite's real results. A listed spec that would wait out the suite's fixed
300 s for a reason that cannot change here (SKIPPED), and the github.com ones while it
does not answer, are skipped by name (--ginkgo.skip) and must be reported skipped.
The suite runs twice, as Shipwright splits it: the specs not labelled PipelineRun, then
those that are, with our controller started with BUILDRUN_EXECUTOR=PipelineRun.
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
from pathlib import Path
from typing import Any

import pytest

from controller.runtime.kube import Kube
from controller.shipwright.resources import CLUSTERBUILDSTRATEGIES
from devtools.cluster import certs, netns
from devtools.cluster.fates import FateWebhook
from devtools.cluster.localcluster import REPO
from devtools.cluster.polling import transient, wait_until
from devtools.cluster.processes import die_with_parent
from devtools.cluster.stack import TektonStack

pytestmark = [pytest.mark.cluster, pytest.mark.shipwright_it]

SPECS = 119
# A spec takes 9-18 s (each waits for its namespace to go); one that fails waiting for a
# state waits out the suite's fixed 300 s (TestBuild.TimeOut), hence the skips below. The
# whole run takes about half an hour (BENCHMARKS.md); this bounds a hung one.
SUITE_TIMEOUT = 60 * 60
# The suite's conversion webhook serves TLS from these fixed paths.
WEBHOOK_CERT, WEBHOOK_KEY = Path("/tmp/server-cert.pem"), Path("/tmp/server-key.pem")
GITHUB = ("github.com", 443)
# The Ginkgo label of the specs that need BuildRuns run as PipelineRuns.
PIPELINERUN = "PipelineRun"

NEEDS_GITHUB = ("verify.repository: asks github.com, which this machine cannot reach "
                "(run, and expected to pass, when it answers)")
_KWOK = ("kwok plays the kubelet and runs no container: a step's fate comes from its command "
         "(hack/kwok/stages/README: true, false and sleep are emulated), and a kaniko or "
         "buildah step exits 0 at once, so ")
BUILD_ENDS_AT_ONCE = _KWOK + (
    "a spec that needs the build still running (to time out, be cancelled, outlive its "
    "Build, keep its ServiceAccount) or failing as the real tool would, sees it Succeeded")
BUILD_ENDS_AT_ONCE_WAITS = BUILD_ENDS_AT_ONCE + (
    "; this one then waits out the suite's fixed 300 s, so it is skipped by name")
BUILD_RACES = _KWOK + (
    "whether the spec's next 3 s poll still finds the build running (or timed out first, "
    "for a 1 s timeout) depends on the machine's load: each passed in one whole run and "
    "failed in another, so it is skipped by name rather than listed as failing or passing")
KWOK_RUNS_NOTHING = ("kwok runs no container, so nothing the strategy's steps would write "
                     "(results, source timestamps, vulnerabilities, an image) exists")
FIELD_MANAGER = ("controller difference, for the lead: looks for Shipwright's field managers "
                 "by name in managedFields (shipwright-buildrun-controller on the TaskRun, "
                 "shipwright-build-controller on the Build); ours writes as "
                 "buildrun-controller (controller/runtime/kube.py USER_AGENT)")
RETENTION_IMMUTABLE = ("ours refuses a change to a BuildRun's spec.retention, a finished one's "
                       "TTL too (its CRD: 'spec.retention is immutable: create a new "
                       "BuildRun'; docs/shipwright-api.md's CRD differences: a BuildRun is "
                       "one try); Shipwright lets it be lowered")
LONG_NAME = ("ours cuts label values to 63 characters, so a BuildRun with a 64-character name "
             "runs (docs/taskrun.md, \"Where we differ on purpose\"); Shipwright's TaskRun is "
             "refused and the BuildRun fails BuildRunNameInvalid")
# Specs listed for these reasons are skipped by name (--ginkgo.skip) and must be reported
# skipped; NEEDS_GITHUB ones only while github.com does not answer.
SKIPPED = frozenset({BUILD_ENDS_AT_ONCE_WAITS, BUILD_RACES})
# Each spec of the suite that cannot pass here, by its full text, and why; every other
# spec must pass. From the whole runs in BENCHMARKS.md.
CANNOT_PASS: dict[str, str] = {
    "Integration tests Build and referenced Source url when the build source url protocol "
    "is http and the verify annotation is true should validate source url successfully":
        NEEDS_GITHUB,
    "Integration tests Build and referenced Source url when the build source url protocol "
    "is https and the verify annotation is true should validate source url successfully":
        NEEDS_GITHUB,
    "Integration tests BuildRuns and TaskRuns when a buildrun is created but fails because "
    "of a timeout should reflect a TaskRunTimeout reason and Completion time on timeout":
        BUILD_ENDS_AT_ONCE_WAITS,
    "Integration tests BuildRuns and TaskRuns when a standalone buildrun is created and the "
    "buildrun is cancelled should reflect a TaskRunCancelled reason and no completionTime":
        BUILD_ENDS_AT_ONCE_WAITS,
    "Integration tests BuildRuns and TaskRuns when a buildrun is created and the buildrun "
    "is cancelled should reflect a TaskRunCancelled reason in the taskrun, BuildRunCanceled "
    "in the buildrun, and no completionTime": BUILD_ENDS_AT_ONCE_WAITS,
    "Integration tests BuildRuns and TaskRuns when a buildrun is created and the taskrun "
    "deleted before completion should reflect a Failed reason": BUILD_ENDS_AT_ONCE_WAITS,
    "Integration tests Build and BuildRuns when a buildrun defines build spec properties "
    "should be able to override the build timeout": BUILD_RACES,
    "Integration tests Build and BuildRuns when a build with a short timeout is defined "
    "should fail the builRun with a Reason": BUILD_ENDS_AT_ONCE,
    "Integration tests Build and BuildRuns when a build is deleted after the buildrun "
    "creation does not fail the buildrun and nothing is reflected in the buildrun status":
        BUILD_ENDS_AT_ONCE,
    "Integration tests BuildRuns and TaskRuns when buildrun uses conditions when condition "
    "status is false reflects a timeout": BUILD_ENDS_AT_ONCE,
    "Integration tests BuildRuns and TaskRuns when buildrun uses conditions when condition "
    "status is false reflects a failed reason": BUILD_ENDS_AT_ONCE,
    "Integration tests BuildRuns and TaskRuns when a buildrun is created and the taskrun "
    "is cancelled should reflect a TaskRunCancelled reason and no completionTime":
        BUILD_ENDS_AT_ONCE,
    "Integration tests BuildRuns and Service-accounts when a buildrun is created with "
    "autogenerated service-account creates a new service-account and deletes it after the "
    "build is terminated": BUILD_ENDS_AT_ONCE,
    "Integration tests BuildRuns and Service-accounts when a buildrun is cancelled with an "
    "autogenerated serviceaccount it deletes it after the build is cancelled":
        BUILD_ENDS_AT_ONCE,
    "Checking BuildRun Status fields Verifying BuildRun status source results should have "
    "the correct source timestamp for Git sources": KWOK_RUNS_NOTHING,
    "Checking BuildRun Status fields Verifying BuildRun status source results should have "
    "the correct source timestamp for Bundle sources": KWOK_RUNS_NOTHING,
    "Vulnerability scan tests when a build with vulnerability scan options is defined "
    "should fail the builRun with a Reason": KWOK_RUNS_NOTHING,
    "Vulnerability scan tests When a buildrun with vulnerability scan is defined should "
    "fail the builRun with a Reason": KWOK_RUNS_NOTHING,
    "Vulnerability scan tests When both build and buildrun with vulnerability scan is "
    "defined should override the vulnerability settings from builRun": KWOK_RUNS_NOTHING,
    "Vulnerability scan tests When a standalone buildrun with vulnerability scan is "
    "defined should fail the builRun with a Reason": KWOK_RUNS_NOTHING,
    "Integration tests BuildStrategies and TaskRuns buildstrategy with defined parameters "
    "when a taskrun fails with an error result surfaces the result to the buildrun":
        KWOK_RUNS_NOTHING,
    "Integration tests for retention limits and ttls for succeeded buildruns. When we lower "
    "a successfully completed buildrun's ttl retention parameters. Original param - 5m, "
    "Updated param - 5s Should not find the buildrun few seconds after it succeeds":
        RETENTION_IMMUTABLE,
    "Integration tests for retention limits and ttls of buildRuns that fail When we lower "
    "a failed completed buildrun's ttl retention parameters. Original param - 5m, Updated "
    "param - 5s Should not find the buildrun few seconds after it succeeds":
        RETENTION_IMMUTABLE,
    "Integration tests BuildRuns and TaskRuns when a buildrun is created with invalid name "
    "fails the buildrun with a proper error in Reason": LONG_NAME,
    "Integration tests BuildRuns and TaskRuns when a buildrun is created should create a "
    "taskrun that is owned by the buildrun": FIELD_MANAGER,
    "Integration tests Build and TaskRun when a build with annotation or label is defined "
    "when creating the build should set the buildrun controller as a field manager":
        FIELD_MANAGER,
    "Integration tests BuildRuns and PipelineRuns when condition status is false reflects "
    "a timeout": BUILD_ENDS_AT_ONCE,
    "Integration tests BuildRuns and PipelineRuns when pipelinerun status changes should "
    "synchronize running status to buildrun": BUILD_RACES,
}


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


def results(report_path: Path) -> tuple[int, dict[str, tuple[str, set[str]]]]:
    """(the random seed, spec -> (its state: "passed", "failed", "skipped", ...; its
    labels)) from Ginkgo's JSON report."""
    [suite] = json.loads(report_path.read_text())
    return suite["SuiteConfig"]["RandomSeed"], {
        spec_name(s): (s["State"], labels(s))
        for s in suite["SpecReports"] if s.get("LeafNodeType") == "It"}


def skip_pattern(names: list[str]) -> str:
    """A --ginkgo.skip regular expression matching exactly these full spec texts. Ginkgo
    matches it against "<suite description> <spec text>" (internal/focus.go), so it is
    anchored at the end and at the blank before the spec's text."""
    return "^Integration Suite (" + "|".join(re.escape(n) for n in names) + ")$"


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


async def run_and_check(stack: TektonStack, kube: Kube, tmp_path: Path, pipelineruns: bool,
                        env: dict[str, str]) -> None:
    """Runs the suite's specs labelled PipelineRun (`pipelineruns`) or all the others,
    with `env` added to the controller's environment, and holds the results to
    CANNOT_PASS."""
    binary = suite_binary()
    ensure_webhook_certs()
    reachable = github_answers()
    skipped = sorted(name for name, why in CANNOT_PASS.items()
                     if why in SKIPPED or (why == NEEDS_GITHUB and not reachable))
    expected_failing = {name for name, why in CANNOT_PASS.items()
                        if why != NEEDS_GITHUB} - set(skipped)

    kubeconfig = str(stack.cluster.kubeconfig)
    controller = (f"{sys.executable} -m controller --kubeconfig {kubeconfig} "
                  "--metrics-bind-address 0 --health-probe-bind-address 0 "
                  "--shutdown-grace-period 5 --log-format text")
    env = {**os.environ, "KUBECONFIG": kubeconfig, "SHIPWRIGHT_IT_CONTROLLER": controller,
           "PYTHONPATH": str(REPO), **env}
    report = tmp_path / "report.json"
    label_filter = PIPELINERUN if pipelineruns else f"!{PIPELINERUN}"
    argv = [str(binary), f"--ginkgo.json-report={report}", "--ginkgo.no-color",
            "--ginkgo.randomize-all", f"--ginkgo.timeout={SUITE_TIMEOUT}s",
            f"--ginkgo.label-filter={label_filter}"]
    if skipped:
        argv.append(f"--ginkgo.skip={skip_pattern(skipped)}")

    before = await cluster_strategies(kube)
    started = time.monotonic()
    port = int(stack.cluster.url.rsplit(":", 1)[1])
    async with FateWebhook(stack.cluster, lambda namespace, buildrun: None,
                           name="steps.buildrun-controller.test", from_steps=True):
        if netns.available() is None:
            async with netns.Gateway(tmp_path / "netns", [port]) as gateway:
                await run_suite(gateway.command(argv), env, tmp_path / "suite.log")
        else:  # no namespaces here: the suite binds :30443 on the host
            await run_suite(argv, env, tmp_path / "suite.log")
    wall = time.monotonic() - started
    for name in await cluster_strategies(kube) - before:  # the suite's, left behind
        await kube.delete(CLUSTERBUILDSTRATEGIES, None, name)

    assert report.exists(), (tmp_path / "suite.log").read_text()[-3000:]
    seed, reported = results(report)
    where = f"(seed {seed}: rerun that order with --ginkgo.seed={seed}; log {tmp_path})"
    selected = {name: state for name, (state, tags) in reported.items()
                if (PIPELINERUN in tags) == pipelineruns}
    counts = collections.Counter(
        "skipped by name" if name in skipped else state for name, state in selected.items())
    print(f"\nShipwright's integration suite, --ginkgo.label-filter={label_filter}: "
          f"{wall:.0f} s, {len(selected)} specs: {dict(counts)} {where}")
    assert len(reported) == SPECS, sorted(reported)
    assert set(CANNOT_PASS) <= set(reported), set(CANNOT_PASS) - set(reported)
    assert {state for name, (state, _) in reported.items() if name not in selected} <= {
        "skipped"}, f"ran a spec --ginkgo.label-filter={label_filter} leaves out"
    skipped = [name for name in skipped if name in selected]
    assert {name: selected[name] for name in skipped} == dict.fromkeys(skipped, "skipped")
    ran = {name: state for name, state in selected.items() if name not in skipped}
    assert sorted(name for name, state in ran.items() if state == "skipped") == [], where
    failed = {name for name, state in ran.items() if state != "passed"}
    assert sorted(failed - expected_failing) == [], f"failing, not in CANNOT_PASS {where}"
    assert sorted((expected_failing & set(ran)) - failed) == [], (
        f"in CANNOT_PASS, passing now {where}")


@pytest.mark.timeout(SUITE_TIMEOUT + 300)
async def test_shipwrights_integration_suite_against_ours(stack: TektonStack, kube: Kube,
                                                          tmp_path: Path) -> None:
    """Every spec but those labelled PipelineRun, as Shipwright's `make test-integration`
    runs them (--label-filter='!PipelineRun'), against our controller as it starts."""
    await run_and_check(stack, kube, tmp_path, pipelineruns=False, env={})


@pytest.mark.timeout(SUITE_TIMEOUT + 300)
async def test_shipwrights_pipelinerun_specs_against_ours(stack: TektonStack, kube: Kube,
                                                         tmp_path: Path) -> None:
    """The specs labelled PipelineRun, against our controller started with Shipwright's
    BUILDRUN_EXECUTOR=PipelineRun (pkg/config: BuildRuns run as PipelineRuns)."""
    await run_and_check(stack, kube, tmp_path, pipelineruns=True,
                        env={"BUILDRUN_EXECUTOR": "PipelineRun"})

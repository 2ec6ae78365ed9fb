"""manifests/: what `kubectl apply -k manifests/` installs, checked for real.

- Every manifest is listed in kustomization.yaml, renders with `kubectl kustomize`,
  and is accepted by a real API server with strict field validation (an unknown
  or misspelt field fails the test). ServiceMonitor and PrometheusRule are
  created against the cut-down monitoring.coreos.com CRDs in manifests/testing/.
- The Deployment's pod template passes Pod Security "restricted" (a Pod made from
  it is admitted by a server-side dry run in the enforcing namespace).
- The RBAC is least privilege: checked statically, by SubjectAccessReview, and by
  running the controller with the Deployment's own flags as its ServiceAccount,
  on an API server with OwnerReferencesPermissionEnforcement on, through every
  kind of call it makes.
- The alert rules and the dashboard's queries parse with promtool, and the
  alerts are unit-tested with `promtool test rules`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from controller.cli import parser as controller_flags
from controller.runtime.kube import (
    EVENTS,
    LEASES,
    SERVICEACCOUNTS,
    ApiError,
    Kube,
    load_api_client,
)
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster.localcluster import LocalCluster, free_port, write_token_kubeconfig
from devtools.fakes.fates import FateWebhook
from tests.harness import World, condition, running_pod, wait_for
from tests.promtools import parse_exposition, prometheus_binary
from tests.shipped import MANIFESTS, kustomization, load

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
NS = "buildrun-controller"
SA_USER = f"system:serviceaccount:{NS}:buildrun-controller"
SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"]

Obj = dict[str, Any]


# -- reading the manifests -------------------------------------------------------------


def generated_configmaps() -> list[Obj]:
    """What kustomize's configMapGenerator makes of kustomization.yaml."""
    out = []
    for gen in kustomization().get("configMapGenerator") or []:
        options = gen.get("options") or {}
        assert options.get("disableNameSuffixHash"), "a stable name, for Grafana's sidecar"
        out.append({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": gen["name"], "namespace": gen["namespace"],
                         "labels": options.get("labels") or {}},
            "data": {Path(f).name: (MANIFESTS / f).read_text() for f in gen["files"]},
        })
    return out


def objects() -> list[Obj]:
    """Every object, in kustomization order, then the generated ConfigMaps."""
    objs = [o for r in kustomization()["resources"] for o in load(MANIFESTS / r)]
    return objs + generated_configmaps()


def one(kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects() if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def resource_path(obj: Obj) -> str:
    api_version, meta = obj["apiVersion"], obj["metadata"]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scoped = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{prefix}{scoped}/{obj['kind'].lower()}s/{meta['name']}"


async def apply(cluster: LocalCluster, obj: Obj, *, dry_run: bool = False) -> Any:
    """Server-side apply, refusing unknown or duplicate fields (fieldValidation=Strict)."""
    query = "fieldManager=manifests-test&force=true&fieldValidation=Strict"
    return await cluster.request(
        "PATCH", f"{resource_path(obj)}?{query}{'&dryRun=All' if dry_run else ''}",
        orjson.dumps(obj), content_type="application/apply-patch+yaml",
    )


# -- static checks -------------------------------------------------------------------


# Manifests a feature that is off by default needs, each a commented-out line of
# kustomization.yaml's resources for whoever turns the feature on.
OPT_IN = {"rbac/pod_logs.yaml": "--failure-log-snippet"}


def test_kustomization_lists_every_manifest() -> None:
    listed = set(kustomization()["resources"])
    on_disk = {
        str(p.relative_to(MANIFESTS)) for p in MANIFESTS.rglob("*.yaml")
        if p.name != "kustomization.yaml" and p.relative_to(MANIFESTS).parts[0] != "testing"
    }
    assert listed | OPT_IN.keys() == on_disk and not listed & OPT_IN.keys()
    text = (MANIFESTS / "kustomization.yaml").read_text()
    for path, flag in OPT_IN.items():
        assert f"  # - {path}\n" in text and flag in text, path
    files = [f for g in kustomization()["configMapGenerator"] for f in g["files"]]
    assert files == ["grafana/dashboard.json"]
    for obj in objects():
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/name") == \
            "buildrun-controller" or obj["kind"] == "CustomResourceDefinition", obj["kind"]


def test_kubectl_kustomize_renders_the_same_objects() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize rendering is not checked")
    out = subprocess.run([kubectl, "kustomize", str(MANIFESTS)], check=True,
                         capture_output=True, text=True).stdout
    rendered = [d for d in yaml.safe_load_all(out) if d]

    def key(o: Obj) -> tuple[str, str, str]:
        return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])

    assert sorted(map(key, rendered)) == sorted(map(key, objects()))
    by_key = {key(o): o for o in rendered}
    deployment = by_key[("Deployment", NS, "buildrun-controller")]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
        one("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    dashboard = by_key[("ConfigMap", NS, "buildrun-controller-dashboard")]
    assert json.loads(dashboard["data"]["dashboard.json"]) == \
        json.loads((MANIFESTS / "grafana" / "dashboard.json").read_text())
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


# (apiGroup, resource) -> verbs: exactly what the controller calls, nothing more.
EXPECTED_CLUSTER_RULES = {
    ("shipwright.io", "buildruns"): {"get", "list", "watch", "patch", "delete"},
    ("shipwright.io", "buildruns/status"): {"update"},
    ("shipwright.io", "buildruns/finalizers"): {"update"},
    ("shipwright.io", "builds"): {"get", "list", "watch", "patch"},
    ("shipwright.io", "builds/status"): {"patch"},
    ("", "secrets"): {"get", "list", "watch"},
    ("shipwright.io", "buildstrategies"): {"get", "list", "watch"},
    ("shipwright.io", "clusterbuildstrategies"): {"get", "list", "watch"},
    ("tekton.dev", "taskruns"): {"get", "list", "watch", "create", "patch"},
    ("tekton.dev", "pipelineruns"): {"get", "list", "watch", "create", "patch"},
    ("", "serviceaccounts"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch"},
    ("", "nodes"): {"list"},
    ("", "events"): {"create"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get"},
}
# The CRDs are read by name only, the four of Shipwright's (controller/shipwright/crds.py).
CRD_NAMES = ["builds.shipwright.io", "buildruns.shipwright.io",
             "buildstrategies.shipwright.io", "clusterbuildstrategies.shipwright.io"]


def _grants(role: Obj) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def test_rbac_is_least_privilege() -> None:
    cluster_role = one("ClusterRole")
    role = one("Role")
    for r in (cluster_role, role):
        for rule in r["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in v for v in rule.get(field, [])), rule
            assert "configmaps" not in rule["resources"], rule
            # Secrets are read, never written (list and watch: metadata only, see README).
            assert "secrets" not in rule["resources"] or rule["verbs"] == [
                "get", "list", "watch"], rule
            assert "nonResourceURLs" not in rule
    assert _grants(cluster_role) == EXPECTED_CLUSTER_RULES
    [crd_rule] = [r for r in cluster_role["rules"]
                  if r["resources"] == ["customresourcedefinitions"]]
    assert crd_rule["resourceNames"] == CRD_NAMES
    # Status only through the subresource; the main resource is never updated.
    assert "update" not in _grants(cluster_role)[("shipwright.io", "buildruns")]
    # Leases only in the controller's own namespace, by a namespaced Role.
    assert not any(g == "coordination.k8s.io" for g, _ in _grants(cluster_role))
    assert role["metadata"]["namespace"] == NS
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["buildrun-controller"], "verbs": ["get", "update"]},
    ]
    deployment_args = one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    lease = controller_flags().parse_args(deployment_args).leader_election_id
    assert role["rules"][1]["resourceNames"] == [lease]
    sa = one("ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NS}
    for binding, target in ((one("ClusterRoleBinding"), cluster_role), (one("RoleBinding"), role)):
        assert binding["subjects"] == [subject]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                      "kind": target["kind"],
                                      "name": target["metadata"]["name"]}


def test_pod_logs_rbac_grants_get_on_pods_log_and_nothing_else() -> None:
    """The opt-in grant of --failure-log-snippet, to the controller's ServiceAccount."""
    role, binding = load(MANIFESTS / "rbac/pod_logs.yaml")
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["subjects"] == one("ClusterRoleBinding")["subjects"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert not any(_grants(role).keys() & _grants(one("ClusterRole")).keys())


async def test_pod_logs_rbac_is_what_lets_the_controller_read_a_log(
        cluster: LocalCluster) -> None:
    """By SubjectAccessReview: without the opt-in file the ServiceAccount cannot read a
    pod's log; with it, it can, and nothing else changes (the file is removed after)."""
    extra = load(MANIFESTS / "rbac/pod_logs.yaml")
    assert not await _access(cluster, "get", "", "pods/log", "apps")
    try:
        for obj in extra:
            await apply(cluster, obj)

        async def granted() -> bool:
            return await _access(cluster, "get", "", "pods/log", "apps")

        await wait_for(granted, 10, what="the pods/log grant")  # the RBAC cache
        assert not await _access(cluster, "list", "", "pods/log", "apps")
        assert not await _access(cluster, "create", "", "pods/exec", "apps")
    finally:
        for obj in reversed(extra):
            await cluster.request("DELETE", resource_path(obj))


def test_deployment_runs_two_hardened_replicas_with_leader_election() -> None:
    deployment = one("Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]

    args = controller_flags().parse_args(container["args"])  # the real CLI accepts them
    assert args.leader_elect
    assert args.metrics_bind_address == ":8080"
    assert args.health_probe_bind_address == ":8081"
    assert pod["terminationGracePeriodSeconds"] > args.shutdown_grace_period
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "probes": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}

    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"cpu", "memory"}

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "volumes" not in pod  # nothing writable is needed

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert container["image"] == f"buildrun-controller:{version}"
    assert {"name": "buildrun-controller", "newTag": version} in kustomization()["images"]


def test_service_monitor_and_pdb_select_the_controller() -> None:
    pod_labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one("Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    monitor = one("ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    pdb = one("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


# -- a real API server ------------------------------------------------------------------


@pytest.fixture(scope="module")
async def applied(cluster: LocalCluster) -> AsyncIterator[list[Any]]:
    """Every manifest applied, in kustomization order, to the session's API server; the
    Deployment deleted after the module. The stack's kube-controller-manager runs the
    deployment and replicaset controllers (for tests/cluster/test_in_cluster.py), and
    kwok runs every pod to completion, so a Deployment left behind has its pods made
    again and again all session long: left in a whole make test, it made thousands and
    kept kube-controller-manager at half a core (2026-12-06)."""
    yield [await apply(cluster, obj) for obj in objects()]
    await cluster.request("DELETE", resource_path(one("Deployment")))


async def test_every_manifest_is_accepted_by_the_api_server(
    cluster: LocalCluster, applied: list[Any]
) -> None:
    assert len(applied) == len(objects())
    for obj, stored in zip(objects(), applied, strict=True):
        assert stored["kind"] == obj["kind"]
        got = await cluster.request("GET", resource_path(obj))
        assert got["metadata"]["uid"] == stored["metadata"]["uid"]
    deployment = await cluster.request("GET", resource_path(one("Deployment")))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    rule = await cluster.request("GET", resource_path(one("PrometheusRule")))
    assert [r["alert"] for r in rule["spec"]["groups"][0]["rules"]] == [
        r["alert"] for r in one("PrometheusRule")["spec"]["groups"][0]["rules"]]


# How server-side apply words an unknown field (strict decoding, or the typed patch).
REFUSED = r"field not declared in schema|unknown field"


async def test_a_misspelt_field_is_refused(cluster: LocalCluster, applied: list[Any]) -> None:
    """The check above is not vacuous: strict validation refuses unknown fields, also
    in the cut-down monitoring CRDs."""
    deployment = copy.deepcopy(one("Deployment"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(RuntimeError, match=REFUSED):
        await apply(cluster, deployment, dry_run=True)
    rule = copy.deepcopy(one("PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["exp"] = rule["spec"]["groups"][0]["rules"][0].pop(
        "expr")
    with pytest.raises(RuntimeError, match=REFUSED):
        await apply(cluster, rule, dry_run=True)


def _pod_from_template(name: str) -> Obj:
    template = one("Deployment")["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": template["metadata"]["labels"]},
            "spec": copy.deepcopy(template["spec"])}


async def test_pod_template_passes_restricted_pod_security(
    cluster: LocalCluster, applied: list[Any]
) -> None:
    namespace = await cluster.request("GET", f"/api/v1/namespaces/{NS}")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = _pod_from_template("pss-check")
    admitted = await cluster.request(
        "POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All&fieldValidation=Strict", pod)
    assert admitted["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"]
    # And the namespace does enforce it: the same Pod with privilege escalation is refused.
    bad = _pod_from_template("pss-negative")
    bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(RuntimeError, match="violates PodSecurity"):
        await cluster.request("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", bad)


# -- Prometheus rules, by Prometheus itself ------------------------------------------------


def _rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": one("PrometheusRule")["spec"]["groups"]}))
    return path


def _annotations(alert: str, **labels: str) -> dict[str, str]:
    """The alert's annotations with {{ $labels.x }} filled in, as Prometheus renders them."""
    rule = next(r for g in one("PrometheusRule")["spec"]["groups"] for r in g["rules"]
                if r.get("alert") == alert)
    return {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], v)
            for k, v in rule["annotations"].items()}


def _alert(alert: str, severity: str, **labels: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": severity, **labels},
            "exp_annotations": _annotations(alert, **labels)}


T = {"namespace": NS, "job": "buildrun-controller-metrics"}


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    all_labels = {**T, **labels}
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(all_labels.items()))
    return {"series": f"{metric}{{{inner}}}", "values": values}


LEADER = "leader_election_master_status"
QUEUE = {"name": "buildrun", "controller": "buildrun"}


def alert_unit_tests() -> list[dict[str, Any]]:
    """`promtool test rules` cases: each alert fires when it should and stays quiet when
    it should not. Series advance one sample per minute."""
    a, b = "10.0.0.1:8080", "10.0.0.2:8080"
    return [
        {"interval": "1m", "name": "retries exhausted: any increase fires, none is quiet",
         "input_series": [_series("buildrun_retry_exhausted_total", "0x20 1x30", instance=a)],
         "alert_rule_test": [
             {"eval_time": "15m", "alertname": "BuildRunRetriesExhausted", "exp_alerts": []},
             {"eval_time": "25m", "alertname": "BuildRunRetriesExhausted",
              "exp_alerts": [_alert("BuildRunRetriesExhausted", "warning", **T)]},
             {"eval_time": "45m", "alertname": "BuildRunRetriesExhausted", "exp_alerts": []},
         ]},
        {"interval": "1m", "name": "error ratio: a third fails for 15m fires",
         "input_series": [
             _series("controller_runtime_reconcile_total", "0+30x60", instance=a,
                     controller="buildrun", result="success"),
             _series("controller_runtime_reconcile_total", "0+15x60", instance=a,
                     controller="buildrun", result="error"),
             _series("controller_runtime_reconcile_errors_total", "0+15x60", instance=a,
                     controller="buildrun")],
         "alert_rule_test": [
             {"eval_time": "12m", "alertname": "BuildRunControllerReconcileErrorsHigh",
              "exp_alerts": []},  # still pending
             {"eval_time": "30m", "alertname": "BuildRunControllerReconcileErrorsHigh",
              "exp_alerts": [_alert("BuildRunControllerReconcileErrorsHigh", "warning", **T)]},
         ]},
        {"interval": "1m", "name": "error ratio: one in ten is quiet",
         "input_series": [
             _series("controller_runtime_reconcile_total", "0+90x60", instance=a,
                     controller="buildrun", result="success"),
             _series("controller_runtime_reconcile_total", "0+10x60", instance=a,
                     controller="buildrun", result="error"),
             _series("controller_runtime_reconcile_errors_total", "0+10x60", instance=a,
                     controller="buildrun")],
         "alert_rule_test": [{"eval_time": "50m",
                              "alertname": "BuildRunControllerReconcileErrorsHigh",
                              "exp_alerts": []}]},
        {"interval": "1m", "name": "queue growing: only on the leader",
         "input_series": [
             _series("workqueue_depth", "0+5x60", instance=a, **QUEUE),
             _series("workqueue_depth", "0+5x60", instance=b, **QUEUE),
             _series(LEADER, "1x60", instance=a, name="buildrun-controller"),
             _series(LEADER, "0x60", instance=b, name="buildrun-controller")],
         "alert_rule_test": [
             {"eval_time": "20m", "alertname": "BuildRunControllerWorkqueueGrowing",
              "exp_alerts": []},  # above 50 since 11m: pending
             {"eval_time": "40m", "alertname": "BuildRunControllerWorkqueueGrowing",
              "exp_alerts": [_alert("BuildRunControllerWorkqueueGrowing", "warning",
                                    **T, instance=a)]},
         ]},
        {"interval": "1m", "name": "queue deep but steady is quiet",
         "input_series": [
             _series("workqueue_depth", "100x60", instance=a, **QUEUE),
             _series(LEADER, "1x60", instance=a, name="buildrun-controller")],
         "alert_rule_test": [{"eval_time": "50m",
                              "alertname": "BuildRunControllerWorkqueueGrowing",
                              "exp_alerts": []}]},
        {"interval": "1m", "name": "stuck reconcile",
         "input_series": [
             _series("workqueue_longest_running_processor_seconds", "0+60x30", instance=a,
                     **QUEUE),
             _series("workqueue_longest_running_processor_seconds", "0x30", instance=b,
                     **QUEUE)],
         "alert_rule_test": [
             {"eval_time": "5m", "alertname": "BuildRunControllerReconcileStuck",
              "exp_alerts": []},
             {"eval_time": "15m", "alertname": "BuildRunControllerReconcileStuck",
              "exp_alerts": [_alert("BuildRunControllerReconcileStuck", "critical",
                                    **T, instance=a)]},
         ]},
        {"interval": "1m", "name": "quarantined objects: held for 10m fires, released is quiet",
         "input_series": [
             _series("informer_quarantined_objects", "0x5 2x20 0x10", instance=a,
                     resource="taskruns"),
             _series("informer_quarantined_objects", "0x40", instance=b, resource="taskruns")],
         "alert_rule_test": [
             {"eval_time": "10m", "alertname": "BuildRunControllerObjectsQuarantined",
              "exp_alerts": []},  # pending
             {"eval_time": "20m", "alertname": "BuildRunControllerObjectsQuarantined",
              "exp_alerts": [_alert("BuildRunControllerObjectsQuarantined", "warning",
                                    **T, instance=a, resource="taskruns")]},
             {"eval_time": "30m", "alertname": "BuildRunControllerObjectsQuarantined",
              "exp_alerts": []},
         ]},
        {"interval": "1m", "name": "no leader: all standbys",
         "input_series": [
             _series(LEADER, "1x5 0x30", instance=a, name="buildrun-controller"),
             _series(LEADER, "0x35", instance=b, name="buildrun-controller")],
         "alert_rule_test": [
             {"eval_time": "4m", "alertname": "BuildRunControllerNoLeader", "exp_alerts": []},
             {"eval_time": "20m", "alertname": "BuildRunControllerNoLeader",
              "exp_alerts": [_alert("BuildRunControllerNoLeader", "critical")]},
         ]},
        {"interval": "1m", "name": "no leader: nothing scraped at all",
         "input_series": [{"series": 'up{job="something-else"}', "values": "1x30"}],
         "alert_rule_test": [
             {"eval_time": "20m", "alertname": "BuildRunControllerNoLeader",
              "exp_alerts": [_alert("BuildRunControllerNoLeader", "critical",
                                    name="buildrun-controller")]},
         ]},
        {"interval": "1m", "name": "a leader: quiet",
         "input_series": [
             _series(LEADER, "0x30", instance=a, name="buildrun-controller"),
             _series(LEADER, "1x30", instance=b, name="buildrun-controller")],
         "alert_rule_test": [{"eval_time": "20m", "alertname": "BuildRunControllerNoLeader",
                              "exp_alerts": []}]},
    ]


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(prometheus_binary("promtool")), *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(900)  # the first run builds promtool from the Go module proxy
def test_promtool_checks_and_unit_tests_the_alerts(tmp_path: Path) -> None:
    rules = _rules_file(tmp_path)
    check = _promtool("check", "rules", rules)
    assert check.returncode == 0, check.stdout + check.stderr
    alerts = [r["alert"] for g in one("PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    tested = {t["alertname"] for case in alert_unit_tests() for t in case["alert_rule_test"]}
    assert tested == set(alerts), "every alert has unit tests"
    tests = tmp_path / "rules_test.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m",
                                     "tests": alert_unit_tests()}))
    result = _promtool("test", "rules", tests)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(900)
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Grafana's $__rate_interval and $__range are replaced as Grafana would, then each
    query is checked as a recording rule."""
    dashboard = json.loads((MANIFESTS / "grafana" / "dashboard.json").read_text())
    rules = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "2m").replace("$__range", "1h")
            assert "$" not in expr, expr
            rules.append({"record": f"dashboard:panel_{panel['id']}_{target['refId']}",
                          "expr": expr})
    path = tmp_path / "dashboard_rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = _promtool("check", "rules", "--lint=none", path)
    assert check.returncode == 0, check.stdout + check.stderr


# -- the controller as its ServiceAccount -------------------------------------------------


async def _access(cluster: LocalCluster, verb: str, group: str, resource: str,
                  namespace: str = "", name: str = "") -> bool:
    resource, _, subresource = resource.partition("/")
    review = await cluster.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": SA_USER, "groups": SA_GROUPS, "resourceAttributes": {
            "verb": verb, "group": group, "resource": resource, "subresource": subresource,
            "namespace": namespace, "name": name}},
    })
    return bool(review["status"].get("allowed"))


DENIED = [
    ("create", "", "secrets"), ("update", "", "secrets"), ("patch", "", "secrets"),
    ("delete", "", "secrets"),
    ("get", "", "configmaps"), ("create", "", "pods"),
    ("delete", "", "pods"), ("update", "", "serviceaccounts"), ("get", "", "pods/log"),
    ("create", "", "serviceaccounts/token"),
    ("list", "", "events"), ("patch", "", "events"), ("delete", "", "events"), ("get", "", "nodes"),
    ("create", "shipwright.io", "buildruns"), ("update", "shipwright.io", "buildruns"),
    ("patch", "shipwright.io", "buildruns/status"), ("get", "shipwright.io", "buildruns/status"),
    ("create", "shipwright.io", "builds"), ("update", "shipwright.io", "builds"),
    ("delete", "shipwright.io", "builds"), ("patch", "shipwright.io", "buildstrategies"),
    ("patch", "shipwright.io", "clusterbuildstrategies"),
    ("delete", "tekton.dev", "taskruns"), ("update", "tekton.dev", "taskruns"),
    ("patch", "tekton.dev", "taskruns/status"), ("delete", "tekton.dev", "pipelineruns"),
    ("update", "tekton.dev", "pipelineruns"), ("patch", "tekton.dev", "pipelineruns/status"),
    ("create", "tekton.dev", "pipelines"), ("create", "tekton.dev", "tasks"),
    ("watch", "", "nodes"), ("patch", "", "nodes"),
    ("create", "rbac.authorization.k8s.io", "rolebindings"),
    ("impersonate", "", "serviceaccounts"), ("escalate", "rbac.authorization.k8s.io", "roles"),
    ("list", "coordination.k8s.io", "leases"),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions"),
    ("update", "apiextensions.k8s.io", "customresourcedefinitions"),
]


async def _service_account_kubeconfig(cluster: LocalCluster, path: Path) -> Path:
    for rel in ("namespace.yaml", "rbac/service_account.yaml", "rbac/cluster_role.yaml",
                "rbac/cluster_role_binding.yaml", "rbac/leader_election_role.yaml",
                "rbac/leader_election_role_binding.yaml"):
        for obj in load(MANIFESTS / rel):
            await apply(cluster, obj)
    token = await cluster.request(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/buildrun-controller/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}})
    return write_token_kubeconfig(path, cluster.url, cluster.ca_file, SA_USER,
                                  token["status"]["token"])


async def _get_text(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.text()


async def _ready(url: str) -> bool:
    try:
        return (await _get_text(url))[0] == 200
    except aiohttp.ClientError:
        return False


@pytest.mark.timeout(300)
async def test_controller_works_with_exactly_its_rbac(
    cluster: LocalCluster, fates: FateWebhook, tmp_path: Path
) -> None:
    """On the session's stack, whose API server has OwnerReferencesPermissionEnforcement
    on (as OpenShift has; tests/conftest.py), which is stricter about the TaskRun's
    blockOwnerDeletion owner reference; Tekton and kwok run the TaskRuns."""
    kubeconfig = await _service_account_kubeconfig(cluster, tmp_path / "sa.kubeconfig")

    for (group, resource), verbs in EXPECTED_CLUSTER_RULES.items():
        names = CRD_NAMES if resource == "customresourcedefinitions" else [""]
        for verb in verbs:
            for name in names:
                assert await _access(cluster, verb, group, resource, "", name), (verb, resource)
    crds = ("apiextensions.k8s.io", "customresourcedefinitions")
    assert not await _access(cluster, "get", *crds, "", "tasks.tekton.dev")
    assert not await _access(cluster, "get", *crds)
    for verb, group, resource in DENIED:
        assert not await _access(cluster, verb, group, resource, "apps"), (verb, resource)
    lease = ("coordination.k8s.io", "leases")
    assert await _access(cluster, "create", *lease, NS)
    assert await _access(cluster, "update", *lease, NS, "buildrun-controller")
    assert not await _access(cluster, "update", *lease, NS, "another-lease")
    assert not await _access(cluster, "create", *lease, "kube-system")

    # The Deployment's flags, with ports free on this machine and, out of cluster, a
    # kubeconfig and the namespace the pod would read from its ServiceAccount.
    container = one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    metrics, probes = free_port(), free_port()
    args = [a for a in container["args"] if not a.startswith(
        ("--metrics-bind-address", "--health-probe-bind-address"))]
    args += [f"--metrics-bind-address=127.0.0.1:{metrics}",
             f"--health-probe-bind-address=127.0.0.1:{probes}",
             f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={NS}"]
    log_path = tmp_path / "controller.log"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "controller", *args, cwd=REPO,
        stdout=_open_log(log_path), stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": "/nonexistent"},
    )
    admin = Kube(await load_api_client(str(cluster.kubeconfig)))
    try:
        await wait_for(lambda: _ready(f"http://127.0.0.1:{probes}/readyz"), 60,
                       what="readyz")
        await _exercise(admin, fates, f"http://127.0.0.1:{metrics}/metrics")
        assert "forbidden" not in _read(log_path).lower(), _read(log_path)[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0, _read(log_path)[-3000:]
        # A clean stop hands the Lease over (an update, by name).
        held = await admin.get(LEASES, NS, "buildrun-controller")
        assert not held["spec"].get("holderIdentity"), held
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await admin.close()


def _open_log(path: Path) -> Any:
    return path.open("wb")


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


async def _exercise(admin: Kube, fates: FateWebhook, metrics_url: str) -> None:
    """Every kind of call the controller makes, as its ServiceAccount."""
    await admin.request("POST", "/api/v1/namespaces", body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
    w = World(admin, "apps", fates)
    await w.strategy()
    # retention.atBuildDeletion: the controller patches the Build in as an owner.
    await w.build(retention={"atBuildDeletion": True})
    w.fate("fails", fate="fail")
    w.fate("cancel", fate="hold")

    # Created (taskruns create, buildruns/finalizers update), status updated, Events
    # created, then deleted by its retention TTL (buildruns delete).
    await w.buildrun("ok", retention={"ttlAfterSucceeded": "2s"})
    await w.taskrun_of("ok", timeout=30)
    ok = await w.finished("ok", timeout=30)
    assert condition(ok)["reason"] == "Succeeded"
    assert [r["kind"] for r in ok["metadata"].get("ownerReferences") or []] == ["Build"]

    async def gone() -> bool:
        try:
            await w.get("ok")
        except ApiError as exc:
            return exc.status == 404
        return False

    await wait_for(gone, 30, what="retention to delete BuildRun ok")

    # A failed TaskRun: its Pod is looked up (pods get).
    await w.buildrun("fails")
    assert condition(await w.finished("fails", timeout=30))["status"] == "False"

    # Cancelled while running: the TaskRun is cancelled (taskruns patch).
    await w.buildrun("cancel")
    taskrun = await w.taskrun_of("cancel", timeout=30)
    await running_pod(w, "cancel")
    await admin.patch(BUILDRUNS, "apps", "cancel", {"spec": {"state": "BuildRunCanceled"}})
    assert condition(await w.finished("cancel", timeout=30))["reason"] == "BuildRunCanceled"
    await wait_for(lambda: _taskrun_cancelled(admin, taskrun), 30, what="TaskRun cancelled")

    # `.generate`: a ServiceAccount created with the push secret, deleted once done; the
    # namespace's `default` (kube-controller-manager's) gets the secret patched in
    # (serviceaccounts create, patch, delete).
    async def has_default() -> bool:
        return await admin.get_or_none(SERVICEACCOUNTS, "apps", "default") is not None
    await wait_for(has_default, 30, what="the default ServiceAccount of apps")
    push = {"image": "registry.example.com/app:latest", "pushSecret": "creds"}
    await w.buildrun("gen", serviceAccount=".generate", output=push)
    taskrun = await w.taskrun_of("gen", timeout=30)
    await w.finished("gen", timeout=30)
    await w.buildrun("to-default", output=push)
    await w.taskrun_of("to-default", timeout=30)
    assert (await admin.get(SERVICEACCOUNTS, "apps", "default"))["secrets"] == [
        {"name": "creds"}]

    async def generated_gone() -> bool:
        try:
            await admin.get(SERVICEACCOUNTS, "apps", "gen")
        except ApiError as exc:
            return exc.status == 404
        return False

    await wait_for(generated_gone, 30, what="the generated ServiceAccount to be deleted")

    # A missing ServiceAccount is a user error, not a 403 (serviceaccounts get).
    await w.buildrun("no-sa", serviceAccount="nobody")
    no_sa = await w.finished("no-sa", timeout=30)
    assert condition(no_sa)["reason"] == "ServiceAccountNotFound", no_sa["status"]

    async def events() -> list[Obj]:
        items: list[Obj] = (await admin.list(EVENTS, "apps"))["items"]
        # Events are posted a moment after the status write (the recorder never waits).
        named = {e["involvedObject"]["name"] for e in items}
        return items if named >= {"fails", "cancel", "no-sa"} else []

    posted = await wait_for(events, 10, what="an Event for each outcome")
    # Tekton and the scheduler post Events about TaskRuns and pods here too.
    ours = [e for e in posted if e["involvedObject"]["kind"] == "BuildRun"]
    assert {e["reportingComponent"] for e in ours} == {"buildrun-controller"}

    status, text = await _get_text(metrics_url)
    assert status == 200
    assert "buildrun_retries_total" in parse_exposition(text)[1]  # zero samples, see below
    assert 'leader_election_master_status{name="buildrun-controller"} 1.0' in text
    # Every error class has a zero sample from the start; none may have moved.
    retried = [line for line in text.splitlines()
               if line.startswith("buildrun_retries_total{") and not line.endswith(" 0.0")]
    assert retried == [], f"some call was refused or retried: {retried}"


async def _taskrun_cancelled(admin: Kube, name: str) -> bool:
    taskrun = await admin.get(TASKRUNS, "apps", name)
    return (taskrun.get("spec") or {}).get("status") == "TaskRunCancelled"

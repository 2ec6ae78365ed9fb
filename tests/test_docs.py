"""README.md says what the code does: flags, state table and diagram, RBAC, alerts,
`make dev` samples. (The metrics table is checked against a live scrape in
tests/cluster/test_dashboard_metrics.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from controller.buildrun.states import TABLE
from controller.cli import parser
from devtools.dev.run import SAMPLES

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    """The text under `## title` (or `### title`) up to the next heading of that level."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", README, re.M)
    assert match, f"README has no section {title!r}"
    level = match[1]
    rest = README[match.end():]
    end = re.search(rf"^{level} ", rest, re.M)
    return rest[: end.start()] if end else rest


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-:| ]+\|$", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:]  # without the header


def test_the_two_commands_are_as_they_were() -> None:
    two = section("The two commands")
    assert "make test   # set up (venv, Python deps, real kube-apiserver + etcd built from " \
        "the Go module proxy) and run every test" in two
    assert "make dev    # run the controller locally against a local Kubernetes with real " \
        "Tekton (kwok plays the kubelet)" in two


def _plain(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_flags_table_matches_the_cli() -> None:
    rows = {r[1].strip("`"): r for r in table_rows(section("Configuration"))}
    groups = {a.option_strings[0]: g.title for g in parser()._action_groups
              for a in g._group_actions if a.option_strings and a.dest != "help"}
    assert set(rows) == set(groups)
    for action in parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flag = action.option_strings[0]
        group, _, default, _ = rows[flag]
        assert (groups[flag] or "").startswith(group), (flag, group, groups[flag])
        if action.default not in (None, False):
            assert f"`{_plain(action.default)}`" == default, (flag, default, action.default)


def test_state_table_matches_states_table() -> None:
    text = section("How a BuildRun moves")
    rows = {r[0]: r for r in table_rows(text) if r[0].isdigit()}
    assert sorted(rows, key=int) == [str(r.number) for r in TABLE]
    for row in TABLE:
        _, phase, when, *_ = rows[str(row.number)]
        assert (phase, when) == (row.phase.value, row.when), row.number


def test_state_diagram_puts_each_row_on_its_phase() -> None:
    text = section("How a BuildRun moves")
    diagram = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    phases = {r.number: r.phase.value for r in TABLE}
    seen: set[int] = set()
    for line in diagram.splitlines():
        match = re.match(r"\s*(\w+) --> (\w+|\[\*\]) : (.*)", line)
        if not match:
            continue
        for number in map(int, re.findall(r"row (\d+)", match[3])):
            assert phases[number] == match[1], line
            seen.add(number)
    assert seen == set(phases), "every row of the table is in the diagram"
    assert "USER ERROR" in diagram and "SYSTEM ERROR" in diagram


def test_permissions_table_matches_the_cluster_role() -> None:
    role = yaml.safe_load((REPO / "manifests/rbac/cluster_role.yaml").read_text())
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    documented = {}
    for group, resource, verbs, _ in table_rows(section("The permissions it needs")):
        group = "" if group == "core" else group.strip("`")
        if resource.strip("`") == "leases":
            continue
        documented[(group, resource.strip("`"))] = {v.strip() for v in verbs.split(",")}
    assert documented == granted


def test_alerts_table_matches_the_prometheus_rule() -> None:
    rule = yaml.safe_load((REPO / "manifests/monitoring/prometheus_rule.yaml").read_text())
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    documented = [r[0].strip("`") for r in table_rows(section("Alerts"))]
    assert documented == alerts
    severities = {r["alert"]: r["labels"]["severity"] for g in rule["spec"]["groups"]
                  for r in g["rules"]}
    assert {r[0].strip("`"): r[2] for r in table_rows(section("Alerts"))} == severities


def test_make_dev_samples_table_matches_the_samples() -> None:
    rows = table_rows(section("`make dev`"))
    assert [(r[0].strip("`"), r[2].strip("`")) for r in rows] == [
        (s.name, s.expect) for s in SAMPLES]


def test_dashboard_picture_is_there() -> None:
    assert "![" in section("Reading the dashboard")
    png = REPO / "docs" / "dashboard.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""README.md and docs/ say what the code does: flags, state table and diagram, RBAC,
alerts, `make dev` samples; the README maps every file of docs/, and each docs/ page
opens with a paragraph saying what it is for. (The metrics table is checked against a
live scrape in tests/cluster/test_dashboard_metrics.py; the other tables of docs/ by
the tests of what they describe, each through tests/doctext.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from controller.buildrun.states import TABLE
from controller.cli import parser
from devtools.dev.run import SAMPLES
from devtools.dev.samples import REAL_BUILD
from tests.doctext import REPO, section, table_rows
from tests.test_codemap import repo_files

README = "README.md"
METRICS = "docs/metrics.md"


def test_the_two_commands_are_as_they_were() -> None:
    two = section(README, "The two commands")
    assert "make test   # set up (venv, Python deps, real kube-apiserver + etcd built from " \
        "the Go module proxy) and run every test" in two
    assert "make dev    # run the controller locally against a local Kubernetes with real " \
        "Tekton (kwok plays the kubelet)" in two


def _plain(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_flags_table_matches_the_cli() -> None:
    flags = section(README, "Configuration", subsections=False)  # "Settings" is the environment
    rows = {r[1].strip("`"): r for r in table_rows(flags)}
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
    text = section(README, "How a BuildRun moves")
    rows = {r[0]: r for r in table_rows(text) if r[0].isdigit()}
    assert sorted(rows, key=int) == [str(r.number) for r in TABLE]
    for row in TABLE:
        _, phase, when, *_ = rows[str(row.number)]
        assert (phase, when) == (row.phase.value, row.when), row.number


def test_state_diagram_puts_each_row_on_its_phase() -> None:
    text = section(README, "How a BuildRun moves")
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
    """The table lists the ClusterRole's grants and those of the opt-in pod_logs.yaml
    (--failure-log-snippet), whose row says so."""
    roles = [yaml.safe_load((REPO / "manifests/rbac/cluster_role.yaml").read_text()),
             next(yaml.safe_load_all((REPO / "manifests/rbac/pod_logs.yaml").read_text()))]
    granted = {(g, r): set(rule["verbs"]) for role in roles for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    rows = table_rows(section(README, "The permissions it needs"))
    assert next(why for _, resource, _, why in rows if resource == "`pods/log`").startswith(
        "only with `--failure-log-snippet`")
    documented = {}
    for group, resource, verbs, _ in table_rows(section(README, "The permissions it needs")):
        group = "" if group == "core" else group.strip("`")
        if resource.strip("`") == "leases":
            continue
        documented[(group, resource.strip("`"))] = {v.strip() for v in verbs.split(",")}
    assert documented == granted


def test_alerts_table_matches_the_prometheus_rule() -> None:
    rule = yaml.safe_load((REPO / "manifests/monitoring/prometheus_rule.yaml").read_text())
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    documented = [r[0].strip("`") for r in table_rows(section(METRICS, "Alerts"))]
    assert documented == alerts
    severities = {r["alert"]: r["labels"]["severity"] for g in rule["spec"]["groups"]
                  for r in g["rules"]}
    assert {r[0].strip("`"): r[2] for r in table_rows(section(METRICS, "Alerts"))} == severities


def test_make_dev_samples_table_matches_the_samples() -> None:
    rows = table_rows(section(README, "`make dev`"))
    assert [(r[0].strip("`"), r[2].strip("`")) for r in rows] == [
        (s.name, s.expect) for s in (*SAMPLES, REAL_BUILD)]


def test_dashboard_picture_is_there() -> None:
    assert "![" in section(METRICS, "Reading the dashboard")
    png = REPO / "docs" / "dashboard.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def docs_files() -> set[str]:
    """The files of docs/ that git tracks or would track."""
    return {str(f) for f in repo_files() if f.parts[0] == "docs"}


def test_the_docs_map_lists_every_file_of_docs_once() -> None:
    named = [re.match(r"\[([^]]+)\]", r[0]) for r in table_rows(section(README, "Docs map"))]
    assert all(named), "each row of the docs map starts with a link to its file"
    files = [m[1] for m in named if m]
    assert sorted(files) == sorted(docs_files()), "the docs map and docs/ differ"
    assert len(files) == len(set(files))


def test_each_docs_page_opens_with_a_paragraph_saying_what_it_is_for() -> None:
    for page in sorted(f for f in docs_files() if f.endswith(".md")):
        lines = (REPO / page).read_text().splitlines()
        assert lines[0].startswith("# ") and not lines[1], page
        opening = lines[2:lines.index("", 2)]
        assert opening and not re.match(r"[#|`>(-]", opening[0]), \
            f"{page} opens with a heading, table, list or fence, not a paragraph"
        assert len(" ".join(opening).split()) >= 20, f"{page}: say what the page is for"


def test_section_stops_at_its_level_and_skips_code_blocks(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n## A\n\n```sh\n# a comment\n```\n### A.1\n\nsub\n## B\n\nb\n")
    assert section(str(doc), "A") == "\n```sh\n# a comment\n```\n### A.1\n\nsub\n"
    assert section(str(doc), "A", subsections=False) == "\n```sh\n# a comment\n```\n"
    assert section(str(doc), "B") == "\nb\n"


def test_table_rows_drops_each_tables_header() -> None:
    text = "| h | i |\n|---|---|\n| 1 | 2 |\n\ntext\n\n| j |\n|---|\n| 3 |\n"
    assert table_rows(text) == [["1", "2"], ["3"]]

"""devtools.cluster.fixtures keeps the promises its docstring makes (no API server needed)."""

from __future__ import annotations

from devtools.cluster import fixtures


def test_the_default_buildrun_runs_against_the_default_strategy_and_build() -> None:
    strategy, build, run = fixtures.strategy(), fixtures.build(), fixtures.buildrun("r")
    assert run["spec"]["build"]["name"] == build["metadata"]["name"] == fixtures.BUILD
    assert build["spec"]["strategy"] == {"name": strategy["metadata"]["name"],
                                         "kind": "BuildStrategy"}
    assert all("default" in p for p in strategy["spec"]["parameters"])
    assert build["spec"] == fixtures.build_spec()


def test_every_call_returns_a_new_object() -> None:
    first = fixtures.strategy()
    first["spec"]["parameters"].append({"name": "x"})
    first["spec"]["steps"][0]["args"].append("--y")
    assert fixtures.strategy() == {
        "apiVersion": fixtures.API, "kind": "BuildStrategy", "metadata": {"name": "kaniko"},
        "spec": {"parameters": [fixtures.dockerfile_parameter()],
                 "steps": [{"name": "build", "image": fixtures.KANIKO,
                            "command": list(fixtures.KANIKO_COMMAND),
                            "args": list(fixtures.DOCKERFILE_ARGS)}]},
    }
    fixtures.build_spec()["source"]["git"]["url"] = "elsewhere"
    assert fixtures.build_spec()["source"]["git"]["url"] == fixtures.SOURCE_URL


def test_spec_fields_add_or_replace_and_may_be_named_build() -> None:
    assert fixtures.buildrun("r", None, build={"name": "other"}, timeout="5m")["spec"] == {
        "build": {"name": "other"}, "timeout": "5m"}
    assert fixtures.buildrun("r", None)["spec"] == {}
    spec = fixtures.build("b", strategy="s", output={"image": "x"}, timeout="1m")["spec"]
    assert spec["strategy"]["name"] == "s"
    assert spec["output"] == {"image": "x"}
    assert spec["timeout"] == "1m"
    assert fixtures.strategy(parameters=[])["spec"]["parameters"] == []

"""Any Build the CRD's types admit gets a verdict: a known reason and a bounded message,
never an exception (which would be a reconcile panic, retried until the budget runs out)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.builds import reasons
from controller.builds.validation import MESSAGE_MAX, Lookups, repository_probe, validate

text = st.one_of(st.sampled_from(["", "a", "Exists", "Equal", "NoSchedule", "GitHub", "Image",
                                  "Pipeline", "Git", "OCI", "true", "SourceTimestamp", "1",
                                  "shp-x", "kubernetes.io/os"]),
                 st.text(max_size=80))
names = st.lists(text, max_size=3)


def maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), values)


def objects(**fields: Any) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


spec = objects(
    source=maybe(objects(type=text, git=maybe(objects(url=text, cloneSecret=maybe(text))),
                         ociArtifact=maybe(objects(image=text, pullSecret=maybe(text))),
                         local=maybe(objects(name=text)))),
    strategy=objects(name=text, kind=maybe(text),
                     stepResources=st.lists(objects(name=text), max_size=2)),
    output=objects(image=text, pushSecret=maybe(text), timestamp=maybe(text),
                   platforms=st.lists(objects(os=text, arch=text), max_size=3)),
    paramValues=st.lists(objects(name=text, value=maybe(text),
                                 values=maybe(st.lists(objects(value=maybe(text)),
                                                       max_size=2))), max_size=3),
    env=st.lists(objects(name=text, value=text, valueFrom=maybe(objects())), max_size=3),
    volumes=st.lists(objects(name=text), max_size=2),
    nodeSelector=st.dictionaries(text, text, max_size=3),
    tolerations=st.lists(objects(key=text, operator=text, value=text, effect=text,
                                 tolerationSeconds=maybe(st.integers())), max_size=2),
    schedulerName=maybe(text),
    runtimeClassName=maybe(text),
    trigger=maybe(objects(when=st.lists(objects(
        name=text, type=text, github=maybe(objects(events=names)),
        image=maybe(objects(names=names)),
        objectRef=maybe(objects(name=text, status=names,
                                selector=st.dictionaries(text, text, max_size=2)))),
        max_size=3))),
    retention=maybe(objects(atBuildDeletion=st.booleans())),
)
strategy_spec = objects(
    parameters=st.lists(objects(name=text, type=st.sampled_from(["string", "array"]),
                                default=maybe(text)), max_size=3),
    volumes=st.lists(objects(name=text, overridable=maybe(st.booleans())), max_size=2),
    steps=st.lists(objects(name=text), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(spec=spec, name=text, annotation=maybe(text), strategy=maybe(strategy_spec),
       missing=st.frozensets(text, max_size=2))
def test_every_admitted_build_gets_a_bounded_verdict(
    spec: dict[str, Any], name: str, annotation: str | None,
    strategy: dict[str, Any] | None, missing: frozenset[str],
) -> None:
    build: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}
    if annotation is not None:
        build["metadata"]["annotations"] = {"build.shipwright.io/verify.repository": annotation}
    repository_probe(build)
    found = None if strategy is None else {"spec": strategy}
    verdict = validate(build, Lookups(missing, found))
    assert verdict.reason in reasons.FAILURE_REASONS | {reasons.SUCCEEDED}
    assert 0 < len(verdict.message) <= MESSAGE_MAX

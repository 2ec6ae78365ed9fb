"""soak.truth's plan, without a cluster: the kinds of build in the proportions asked,
in an order the seed fixes."""

from __future__ import annotations

from soak.truth import Config, make_plan


def test_the_plan_has_as_many_of_each_kind_as_the_weights_say() -> None:
    plan = make_plan(Config(builds=36))
    counts = {k: sum(1 for p in plan if p.kind == k) for k in {p.kind for p in plan}}
    assert counts == {"success": 9, "failure": 6, "timeout": 5, "cancel-late": 7,
                      "recreate": 5, "cancel-early": 4}
    assert len({p.name for p in plan}) == 36
    assert make_plan(Config(builds=36)) == plan  # the seed decides
    six = make_plan(Config(builds=6, weights=(1, 1, 1, 1, 1, 1)))
    assert sorted(p.kind for p in six) == sorted(
        ["success", "failure", "timeout", "cancel-late", "recreate", "cancel-early"])

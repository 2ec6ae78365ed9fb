"""controller.runtime.name_rules: Kubernetes' name rules. Their messages, quoted in the
Build's and BuildRun's reasons, are held to Shipwright's in tests/unit/builds/
test_validation.py and tests/unit/buildrun/test_buildrun_checks.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.runtime.name_rules import (
    LABEL_VALUE_MAX,
    as_label_value,
    label_value_errors,
    qualified_name_errors,
)


def test_qualified_name_prefix() -> None:
    assert qualified_name_errors("example.com/x") == []
    assert qualified_name_errors("/x") == ["prefix part must be non-empty"]
    assert qualified_name_errors("Bad_/x")[0].startswith("prefix part a lowercase RFC 1123")


@given(st.text())
def test_as_label_value_makes_any_text_a_valid_label_value(text: str) -> None:
    assert label_value_errors(as_label_value(text)) == []


def test_as_label_value_keeps_a_valid_value_and_cuts_a_long_one() -> None:
    assert as_label_value("My_value.1") == "My_value.1"
    assert as_label_value("-a b-") == "a-b"
    assert as_label_value("x" * 70) == "x" * LABEL_VALUE_MAX

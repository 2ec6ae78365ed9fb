"""controller.runtime.name_rules: Kubernetes' name rules. Their messages, quoted in the
Build's and BuildRun's reasons, are held to Shipwright's in tests/unit/builds/
test_validation.py and tests/unit/buildrun/test_buildrun_checks.py."""

from __future__ import annotations

from controller.runtime.name_rules import qualified_name_errors


def test_qualified_name_prefix() -> None:
    assert qualified_name_errors("example.com/x") == []
    assert qualified_name_errors("/x") == ["prefix part must be non-empty"]
    assert qualified_name_errors("Bad_/x")[0].startswith("prefix part a lowercase RFC 1123")

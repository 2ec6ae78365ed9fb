"""Kubernetes' rules for names and label values, as k8s.io/apimachinery/pkg/util/validation
(v0.36.1, Shipwright v0.20.13's go.mod) states them: each rule's longest value, its
format, and the messages its validators report, which Shipwright quotes in its reasons'
messages. The Build checks, the BuildRun checks and the run generators all ask here.

Since v0.36 a label value's and a label key's checks come from
pkg/api/validate/content, which counts "bytes"; the DNS subdomain's still says
"characters".
"""

from __future__ import annotations

import re

# The longest each may be (validation.go: LabelValueMaxLength, DNS1123LabelMaxLength,
# qualifiedNameMaxLength, DNS1123SubdomainMaxLength).
LABEL_VALUE_MAX = 63
DNS1123_LABEL_MAX = 63
QUALIFIED_NAME_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start "
              "and end with an alphanumeric character")
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an "
                    "alphanumeric character")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case "
                          "alphanumeric characters, '-' or '.', and must start and end with "
                          "an alphanumeric character")


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    shown = "".join(f"{' or ' if i else ''}'{e}', " for i, e in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _too_long(value: str, limit: int) -> bool:
    return len(value.encode()) > limit  # Go's len counts bytes


def label_value_errors(value: str) -> list[str]:
    """IsValidLabelValue: what is wrong with `value` as a label value; [] for a valid one."""
    errors = []
    if _too_long(value, LABEL_VALUE_MAX):
        errors.append(f"must be no more than {LABEL_VALUE_MAX} bytes")
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT,
                                   "MyValue", "my_value", "12345"))
    return errors


def as_label_value(text: str) -> str:
    """`text` made a valid label value: each character a label value may not hold made
    '-', cut to LABEL_VALUE_MAX, and alphanumeric at both ends."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:LABEL_VALUE_MAX].strip("-_.")


def dns1123_subdomain_errors(value: str) -> list[str]:
    """IsDNS1123Subdomain: what is wrong with `value` as a DNS-1123 subdomain (the name
    of most objects); [] for a valid one."""
    errors = []
    if _too_long(value, DNS1123_SUBDOMAIN_MAX):
        errors.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not re.fullmatch(_DNS1123_SUBDOMAIN_FMT, value):
        errors.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT,
                                   "example.com"))
    return errors


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: what is wrong with `value` as a qualified name (a label key: a
    name with an optional DNS subdomain prefix and '/'); [] for a valid one."""
    errors: list[str] = []
    regex = _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
    parts = value.split("/")
    if len(parts) > 2:
        return [f"a valid label key {regex} with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {e}" for e in dns1123_subdomain_errors(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif _too_long(name, QUALIFIED_NAME_MAX):
        errors.append(f"name part must be no more than {QUALIFIED_NAME_MAX} bytes")
    if not re.fullmatch(_QNAME_FMT, name):
        errors.append(f"name part {regex}")
    return errors

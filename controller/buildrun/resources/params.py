"""Parameter values put into the TaskRun as Shipwright puts them (checked first by
`controller.shipwright.params.validate_params`, as Shipwright checks them).

A value is `{name, value}`, `{name, configMapValue}`, `{name, secretValue}` (a single
value) or `{name, values: [...]}` whose items are `{value | configMapValue |
secretValue}`. A ConfigMap or Secret value becomes an environment variable
(`valueFrom`) on every step that references the parameter, and the parameter's value
is `$(NAME)` (or `format` with `${CONFIGMAP_VALUE}` / `${SECRET_VALUE}` replaced by
it), so Kubernetes resolves it when the pod starts.

Reference: Shipwright v0.20's pkg/reconciler/buildrun/resources/params.go.
"""

from __future__ import annotations

import hashlib
from typing import Any

from controller.runtime.errors import UserError
from controller.shipwright.params import (
    EMPTY_ARRAY_ITEM_PARAMETER_VALUES,
    MISSING_PARAMETER_VALUES,
    UNDEFINED_PARAMETER,
    override_params,
    quoted,
    set_value_keys,
)

JSON = dict[str, Any]

CONFIGMAP_ENV_PREFIX = "SHP_CONFIGMAP_PARAM_"
SECRET_ENV_PREFIX = "SHP_SECRET_PARAM_"
_SUFFIX_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_SUFFIX_LENGTH = 5


def references_param(step: JSON, name: str) -> bool:
    """Whether a step's command, args or env values mention parameter `name` (a prefix
    match, as Shipwright's isStepReferencingParameter)."""
    needles = (f"$(params.{name}", f"$(params['{name}']", f'$(params["{name}"]')
    texts = [*(step.get("command") or []), *(step.get("args") or []),
             *((var.get("value") or "") for var in step.get("env") or [])]
    return any(needle in str(text) for text in texts for needle in needles)


def env_var_name(prefix: str, name: str, key: str) -> str:
    """The variable a ConfigMap or Secret key reaches the steps through. Shipwright draws
    the 5-character suffix at random; ours is a hash of (name, key), so a regenerated
    TaskRun is the same TaskRun."""
    digest = hashlib.sha256(f"{prefix}\0{name}\0{key}".encode()).digest()
    return prefix + "".join(_SUFFIX_CHARS[b % len(_SUFFIX_CHARS)]
                            for b in digest[:_SUFFIX_LENGTH])


def _add_env_from(steps: list[JSON], param: str, prefix: str, ref: JSON) -> str:
    kind = "configMapKeyRef" if prefix == CONFIGMAP_ENV_PREFIX else "secretKeyRef"
    name, key = ref.get("name") or "", ref.get("key") or ""
    variable = next(
        (var["name"] for step in steps for var in step.get("env") or []
         if var.get("name", "").startswith(prefix)
         and ((var.get("valueFrom") or {}).get(kind) or {}).get("name") == name
         and ((var.get("valueFrom") or {}).get(kind) or {}).get("key") == key),
        None,
    ) or env_var_name(prefix, name, key)
    for step in steps:
        if not references_param(step, param):
            continue
        env = step.get("env") or []
        if any(var.get("name") == variable for var in env):
            continue
        step["env"] = [{"name": variable, "valueFrom": {kind: {"name": name, "key": key}}},
                       *env]
    return variable


def _resolve(steps: list[JSON], param: str, item: JSON) -> str | None:
    """A single value's text in the TaskRun; None when it sets none."""
    if not isinstance(item, dict):
        return None
    for kind, prefix, placeholder in (("configMapValue", CONFIGMAP_ENV_PREFIX,
                                       "${CONFIGMAP_VALUE}"),
                                      ("secretValue", SECRET_ENV_PREFIX, "${SECRET_VALUE}")):
        ref = item.get(kind)
        if ref is not None:
            expression = f"$({_add_env_from(steps, param, prefix, ref)})"
            fmt = ref.get("format")
            return expression if fmt is None else str(fmt).replace(placeholder, expression)
    value = item.get("value")
    return None if value is None else str(value)


def apply_param_values(taskrun: JSON, build_values: list[JSON], run_values: list[JSON],
                       strategy_params: list[JSON]) -> None:
    """Append the parameter values to the TaskRun's spec.params (Shipwright's
    HandleTaskRunParam): a declared default is left to Tekton when no value is given."""
    add_param_values(taskrun["spec"]["taskSpec"]["steps"], taskrun["spec"]["params"],
                     build_values, run_values, strategy_params)


def add_param_values(steps: list[JSON], params: list[JSON], build_values: list[JSON],
                     run_values: list[JSON], strategy_params: list[JSON]) -> None:
    """Append the parameter values to `params`, a ConfigMap or Secret value becoming an
    environment variable on those of `steps` that reference the parameter."""
    declared: dict[str, JSON] = {}
    for param in strategy_params:
        declared.setdefault(param.get("name") or "", param)
    for entry in override_params(build_values, run_values):
        name = entry.get("name") or ""
        definition = declared.get(name)
        if definition is None:
            raise UserError(UNDEFINED_PARAMETER,
                            f"the parameter {quoted(name)} is not defined in the build strategy")
        if definition.get("type") == "array":
            if entry.get("values") is None:
                if definition.get("defaults") is None:
                    raise UserError(MISSING_PARAMETER_VALUES,
                                    f"unexpected parameter without any value: {quoted(name)}")
                continue
            items = []
            for index, item in enumerate(entry["values"]):
                text = _resolve(steps, name, item)
                if text is None:
                    raise UserError(EMPTY_ARRAY_ITEM_PARAMETER_VALUES, "unexpected parameter "
                                    f"without any value: {quoted(name)}[{index}]")
                items.append(text)
            params.append({"name": name, "value": items})
        else:
            if not set_value_keys(entry):
                if definition.get("default") is None:
                    raise UserError(MISSING_PARAMETER_VALUES,
                                    f"unexpected parameter without any value: {quoted(name)}")
                continue
            text = _resolve(steps, name, entry)
            params.append({"name": name, "value": text or ""})

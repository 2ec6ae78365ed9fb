"""Shipwright main's blocklist of environment variable names (shipwright-io/build #2275,
after v0.20.13): names that inject code into whatever runs the build (LD_PRELOAD, BASH_ENV,
NODE_OPTIONS, ...), refused in a Build's, a BuildRun's and a strategy step's env with
reason SpecEnvNameForbidden.

Main reads its list from FORBIDDEN_ENV_VAR_NAMES and, when that is unset or empty, uses
`SHIPWRIGHT_MAIN_DEFAULT`. v0.20.13 has no blocklist, and where the two disagree
v0.20.13 wins by default (issue 43): unset or empty here means no blocklist at all;
any other value is read exactly as main reads it (pkg/config SetConfigFromEnv,
pkg/env SetForbiddenEnvVars): comma-separated, each entry trimmed, an empty one skipped,
one ending in `*` a prefix, any other an exact name. Main's own list is
`SHIPWRIGHT_MAIN_DEFAULT`, spelled in README's "Settings" to copy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.runtime.text import go_quote

ENV_FORBIDDEN_ENV_VAR_NAMES = "FORBIDDEN_ENV_VAR_NAMES"

# Main's defaultForbiddenEnvVarNames (pkg/config/config.go), in its order.
SHIPWRIGHT_MAIN_DEFAULT: tuple[str, ...] = (
    "LD_*", "BASH_FUNC_*", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG",
    "LD_PROFILE", "BASH_ENV", "ENV", "CDPATH", "PYTHONSTARTUP", "PERL5OPT", "PERLLIB",
    "PERL5LIB", "RUBYOPT", "NODE_OPTIONS",
)


@dataclass(frozen=True)
class ForbiddenEnvNames:
    """A blocklist: exact names and prefixes. Empty (the default) forbids nothing."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, entries: Iterable[str]) -> ForbiddenEnvNames:
        """Main's SetForbiddenEnvVars: entries trimmed, empty ones skipped, `X*` a prefix."""
        names: set[str] = set()
        prefixes: list[str] = []
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            if entry.endswith("*"):
                prefixes.append(entry[:-1])
            else:
                names.add(entry)
        return cls(frozenset(names), tuple(prefixes))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ForbiddenEnvNames:
        """FORBIDDEN_ENV_VAR_NAMES as main splits it; unset or empty: none (v0.20.13)."""
        env = os.environ if environ is None else environ
        return cls.of(env.get(ENV_FORBIDDEN_ENV_VAR_NAMES, "").split(","))

    def __bool__(self) -> bool:
        return bool(self.names or self.prefixes)

    def forbids(self, name: str) -> bool:
        """Main's IsForbiddenEnvVar."""
        return name in self.names or any(name.startswith(p) for p in self.prefixes)


NO_FORBIDDEN_ENV = ForbiddenEnvNames()


def forbidden_message(name: str) -> str:
    """Main's words for a forbidden name in a Build's or BuildRun's env (Go's %q)."""
    return f"environment variable {go_quote(name)} is forbidden for security reasons"


def forbidden_step_message(step: str, name: str) -> str:
    """Main's words for a forbidden name in a strategy step's own env (resource_builders.go)."""
    return (f"BuildStrategy step {go_quote(step)} defines forbidden environment variable "
            f"{go_quote(name)}")


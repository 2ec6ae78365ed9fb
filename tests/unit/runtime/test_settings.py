"""Leader election durations are checked at start-up as client-go checks them:
lease_duration > renew_deadline > retry_period * 1.2 > 0, with one clear line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from controller.runtime.kube import ConfigError
from controller.settings import LeaderElectionSettings

HOSTILE = [
    # (lease, renew, retry, what the one line says)
    (0, 10, 2, "must be positive"),
    (15, 0, 2, "must be positive"),
    (15, 10, 0, "must be positive"),
    (15, 10, -1, "must be positive"),
    (-15, -20, -30, "must be positive"),
    (float("inf"), 10, 2, "must be positive"),
    (float("nan"), 10, 2, "must be positive"),
    (10, 10, 2, "lease duration (10s) must be longer than the renew deadline (10s)"),
    (5, 10, 2, "lease duration (5s) must be longer than the renew deadline (10s)"),
    (15, 2.4, 2, "renew deadline (2.4s) must be longer than 1.2 x the retry period (2s)"),
    (15, 2, 2, "renew deadline (2s) must be longer than 1.2 x the retry period (2s)"),
]


@pytest.mark.parametrize(("lease", "renew", "retry", "message"), HOSTILE)
def test_hostile_durations_are_refused_with_one_line(
    lease: float, renew: float, retry: float, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        LeaderElectionSettings(namespace="ns", lease_duration=lease, renew_deadline=renew,
                               retry_period=retry)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("lease", "renew", "retry"),
                         [(15, 10, 2), (4, 3, 1), (2, 1, 0.2), (0.5, 0.4, 0.3)])
def test_client_gos_defaults_and_short_test_durations_are_accepted(
    lease: float, renew: float, retry: float
) -> None:
    LeaderElectionSettings(namespace="ns", lease_duration=lease, renew_deadline=renew,
                           retry_period=retry)


def test_the_cli_refuses_hostile_durations_with_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controller", "--leader-elect", "--lease-duration", "0",
         "--kubeconfig", "/nonexistent", "--metrics-bind-address", "0",
         "--health-probe-bind-address", "0"],
        capture_output=True, text=True, timeout=60,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "lease duration, renew deadline and retry period must be positive" in lines[0]


def test_the_cli_takes_its_leader_election_defaults_from_the_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Written once, in LeaderElectionSettings: --leader-elect alone gives its defaults."""
    from controller.cli import parser, settings_from

    monkeypatch.setattr("socket.gethostname", lambda: "host")
    leader = settings_from(parser().parse_args(
        ["--leader-elect", "--leader-election-namespace", "ns"])).leader_election
    assert leader is not None
    assert leader == LeaderElectionSettings(namespace="ns", identity=leader.identity)
    assert leader.identity.startswith("host_")


@pytest.mark.parametrize("argv", [[], ["--failure-log-lines", "0"]])
def test_the_failure_log_snippet_is_off_unless_asked_for(argv: list[str]) -> None:
    from controller.cli import parser, settings_from

    assert settings_from(parser().parse_args(argv)).log_snippet is None


def test_the_failure_log_snippet_takes_its_bounds_from_the_flags() -> None:
    from controller.cli import parser, settings_from
    from controller.settings import LogSnippetSettings

    on = settings_from(parser().parse_args(["--failure-log-snippet"])).log_snippet
    assert on == LogSnippetSettings(lines=20, max_bytes=2048)
    bounds = ["--failure-log-snippet", "--failure-log-lines", "5", "--failure-log-bytes", "300"]
    assert settings_from(parser().parse_args(bounds)).log_snippet == LogSnippetSettings(5, 300)


@pytest.mark.parametrize(("lines", "max_bytes"), [(0, 2048), (-1, 2048), (20, 0),
                                                  (20, 64 * 1024 + 1)])
def test_bad_failure_log_bounds_are_refused_with_one_line(lines: int, max_bytes: int) -> None:
    from controller.settings import LogSnippetSettings

    with pytest.raises(ConfigError, match="--failure-log-lines must be at least 1") as e:
        LogSnippetSettings(lines, max_bytes)
    assert "\n" not in str(e.value)

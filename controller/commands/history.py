"""`history NAMESPACE/NAME`: one BuildRun's status and its Events, oldest first.

What `kubectl describe buildrun` would show, arranged as a timeline: the
BuildRun's outcome and timestamps, then every Event recorded on the BuildRun
and on its TaskRun (by the controller, and by Tekton in a real cluster), in
the order they happened, with the time since the BuildRun was created.

    python -m controller history demo/hello [--kubeconfig PATH] [--context NAME] [-o json]

(`buildrun-controller history ...` once installed; `python -m
controller.commands.history ...` is the same command on its own parser.)

Exit codes: 0 shown, 1 no such BuildRun, 2 bad connection settings.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any, TextIO

import orjson

from controller.commands.runner import CommandError, fail, run, with_kube
from controller.runtime.errors import is_not_found
from controller.runtime.kube import EVENTS, JSON, ApiError, Kube
from controller.runtime.timestamps import format_time, parse_time
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.recorded_executor import RecordedExecutor, recorded_executor
from controller.shipwright.resources import BUILDRUNS, TASKRUNS

PROG = "buildrun-controller history"
DESCRIPTION = "Print a BuildRun's status and its Events (and its TaskRun's) in time order."


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command's arguments, on its own parser (`parser`) or on the `history`
    subcommand of controller/cli.py's."""
    p.add_argument("buildrun", metavar="NAMESPACE/NAME")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else "
                   "$KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context to use")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    return p


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog=PROG, description=DESCRIPTION))


def event_time(event: JSON) -> datetime.datetime | None:
    """When it happened: eventTime (events.k8s.io), else firstTimestamp, else creation."""
    for text in (event.get("eventTime"), event.get("firstTimestamp"),
                 event.get("lastTimestamp"), event["metadata"].get("creationTimestamp")):
        when = parse_time(text)
        if when is not None:
            return when
    return None


def _offset(when: datetime.datetime | None, origin: datetime.datetime | None) -> str:
    if when is None or origin is None:
        return ""
    seconds = (when - origin).total_seconds()
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours}h{minutes:02d}m"


async def _events_of(kube: Kube, namespace: str, kind: str, name: str,
                     uid: str | None) -> list[JSON]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    items: list[JSON] = (await kube.list(EVENTS, namespace, fieldSelector=selector))["items"]
    # A deleted-and-recreated namesake has another uid: leave its Events out.
    return [e for e in items if not uid or e["involvedObject"].get("uid") in (None, "", uid)]


async def collect(kube: Kube, namespace: str, name: str) -> tuple[JSON, list[JSON]]:
    """The BuildRun and the Events of it and its TaskRun (or PipelineRun), oldest first."""
    buildrun = await kube.get(BUILDRUNS, namespace, name)
    events = await _events_of(kube, namespace, "BuildRun", name, buildrun["metadata"].get("uid"))
    run = recorded_executor(buildrun.get("status"))
    if run is not None:
        events += await _events_of(kube, namespace, run.kind, run.name, None)
    events.sort(key=_order)
    return buildrun, events


_FAR_PAST = datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _order(event: JSON) -> tuple[datetime.datetime, int, str]:
    """By time; Event timestamps have whole seconds, so within one second by
    resourceVersion, which the API server hands out in the order of writes."""
    version = event["metadata"].get("resourceVersion", "")
    return (event_time(event) or _FAR_PAST, int(version) if version.isdigit() else 0,
            event["metadata"].get("name", ""))


def render_text(buildrun: JSON, events: list[JSON], out: TextIO) -> None:
    meta = buildrun["metadata"]
    spec = buildrun.get("spec") or {}
    status = buildrun.get("status") or {}
    cond = succeeded_condition(buildrun.get("status")) or {}
    created = parse_time(meta.get("creationTimestamp"))
    # Not started yet: "TaskRun (none)", the kind a BuildRun runs as unless configured.
    run = recorded_executor(status) or RecordedExecutor(TASKRUNS.kind, "(none)")
    rows: list[tuple[str, str]] = [
        ("Build", ((spec.get("build") or {}).get("name")) or "(embedded spec)"),
        ("Succeeded", f"{cond.get('status', 'Unknown')} ({cond.get('reason') or 'no reason yet'})"),
        ("Message", cond.get("message") or ""),
        (run.kind, run.name),
        ("Created", meta.get("creationTimestamp") or ""),
        ("Started", _stamp(status.get("startTime"), created)),
        ("Completed", _stamp(status.get("completionTime"), created)),
    ]
    if spec.get("state"):
        rows.append(("Requested", str(spec["state"])))
    if (status.get("output") or {}).get("digest"):
        rows.append(("Image digest", status["output"]["digest"]))
    failure = status.get("failureDetails") or {}
    if failure:
        rows.append(("Failure", " ".join(f"{k}={v}" for k, v in _flat(failure))))
    out.write(f"BuildRun {meta['namespace']}/{meta['name']}\n")
    width = max(len(k) for k, _ in rows) + 1
    for key, value in rows:
        if value:
            out.write(f"  {key + ':':<{width}} {value}\n")
    out.write("\n")
    if not events:
        out.write("No Events (the API server keeps them for an hour by default).\n")
        return
    table = [("TIME", "SINCE CREATED", "TYPE", "OBJECT", "REASON", "FROM", "MESSAGE")]
    for e in events:
        when = event_time(e)
        count = int(e.get("count") or 1)
        message = (e.get("message") or "").replace("\n", " ")
        table.append((
            format_time(when) if when else "",
            _offset(when, created),
            e.get("type") or "",
            f"{e['involvedObject'].get('kind', '')}/{e['involvedObject'].get('name', '')}",
            e.get("reason") or "",
            (e.get("reportingComponent") or (e.get("source") or {}).get("component") or ""),
            message + (f" (x{count})" if count > 1 else ""),
        ))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    out.write(f"Events, oldest first ({len(events)}):\n")
    for r in table:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)]
        out.write("  " + "  ".join([*cells, r[-1]]).rstrip() + "\n")


def _stamp(text: str | None, created: datetime.datetime | None) -> str:
    if not text:
        return "(not yet)"
    offset = _offset(parse_time(text), created)
    return f"{text} ({offset} after creation)" if offset else text


def _flat(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flat(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), value)]


async def history(args: argparse.Namespace, out: TextIO) -> int:
    """The command: 0 shown on `out`, 1 no such BuildRun, 2 bad arguments or connection
    settings, or no API server (runner.py)."""
    namespace, _, name = args.buildrun.partition("/")
    if not namespace or not name or "/" in name:
        return fail(PROG, f"expected NAMESPACE/NAME, got {args.buildrun!r}", 2)

    async def show(kube: Kube) -> int:
        try:
            buildrun, events = await collect(kube, namespace, name)
        except ApiError as exc:
            if is_not_found(exc):
                raise CommandError(f"BuildRun {namespace}/{name} not found") from exc
            raise
        if args.output == "json":
            out.write(orjson.dumps({"buildrun": buildrun, "events": events},
                                   option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            render_text(buildrun, events, out)
        return 0

    return await with_kube(PROG, args, show)


def main(argv: list[str] | None = None) -> int:
    return run(history, parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

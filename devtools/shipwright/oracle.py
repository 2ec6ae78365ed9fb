"""Client of the oracle (hack/oracle): Shipwright's own GenerateTaskRun (or, for a case
with `executor="PipelineRun"`, its GeneratePipelineRun) and Tekton's own SetDefaults +
Validate, in one Go process answering a batch of cases; and (`status_case`) the BuildRun
status Shipwright's reconciler sets from a TaskRun or PipelineRun as Tekton left it.

`ask(cases)` sends every case at once on stdin (one JSON object a line) and reads one
answer a line, in order; see hack/oracle/main.go for the fields. The binary is built
by `hack/oracle/build` (`make oracle`, which `make test` runs first); `binary()` asks
that script for it as devtools.cluster.stack asks for every component, which answers from the
cache at once.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from devtools.cluster.stack import StackError, build

JSON = dict[str, Any]


@functools.cache
def binary() -> Path:
    """The oracle's path, as devtools.cluster.stack finds every built component."""
    path = build("oracle") / "oracle"
    if not path.exists():
        raise StackError(f"oracle: {path} missing (run make oracle)")
    return path


@functools.cache
def tekton_source() -> Path:
    """The source of the Tekton Pipelines module the oracle is built with (its version
    from hack/oracle/go.mod), in the Go module cache, which building the oracle filled."""
    here = Path(__file__).resolve().parents[2] / "hack" / "oracle"
    version = next(line.split()[1] for line in (here / "go.mod").read_text().splitlines()
                   if line.split()[:1] == ["github.com/tektoncd/pipeline"])
    proc = subprocess.run(["go", "mod", "download", "-json",
                           f"github.com/tektoncd/pipeline@{version}"], cwd=here,
                          capture_output=True, text=True, env={**os.environ,
                                                               "GOTOOLCHAIN": "local"})
    if proc.returncode != 0:
        raise StackError(f"oracle: no Tekton {version} source: {proc.stderr.strip()[-500:]}")
    return Path(json.loads(proc.stdout)["Dir"])


def _strategy(strategy: JSON) -> JSON:
    """A request's strategy, its kind read from the object itself."""
    return {"strategyKind": strategy.get("kind") or "BuildStrategy", "strategy": strategy}


def case(strategy: JSON, build: JSON, buildrun: JSON, *, service_account: str = "default",
         env: dict[str, str] | None = None, ours: JSON | None = None,
         case_id: str = "", results: list[JSON] | None = None,
         executor: str = "TaskRun") -> JSON:
    """One request: the strategy's kind is read from the object itself. With `results`
    (a finished TaskRun's status.results) the answer also has Shipwright's status
    from them. `executor` is what Shipwright generates and `ours` is: "TaskRun" or
    "PipelineRun"."""
    extra = {} if results is None else {"results": results}
    return {
        **extra,
        "id": case_id,
        "executor": executor,
        **_strategy(strategy),
        "build": build,
        "buildRun": buildrun,
        "serviceAccountName": service_account,
        "env": env or {},
        "ours": ours,
    }


def status_case(run: JSON, objects: list[JSON], strategy: JSON, build: JSON, buildrun: JSON,
                *, executor: str = "TaskRun", case_id: str = "") -> JSON:
    """A request for the status Shipwright's BuildRun reconciler sets, from the start of
    `buildrun` (of `build`, or the spec it embeds, and `strategy`) to `run` (a TaskRun or
    PipelineRun as Tekton left it), its client holding `objects` (the pods and a
    PipelineRun's TaskRuns; anything else is NotFound) and the Build. The answer's
    "status" has the Succeeded condition, failureDetails, output, source, startTime,
    completionTime and buildSpec."""
    return {"id": case_id, "executor": executor,
            **_strategy(strategy), "build": build, "buildRun": buildrun,
            "statusOf": {"executor": run, "objects": objects}}


def ask(cases: list[JSON], timeout: float = 300) -> list[JSON]:
    """The oracle's answers to `cases`, in order, from one process."""
    stdin = "".join(json.dumps(c) + "\n" for c in cases)
    proc = subprocess.run([str(binary())], input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise StackError(f"oracle: exit code {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if len(answers) != len(cases):
        raise StackError(f"oracle: {len(cases)} cases, {len(answers)} answers")
    return answers

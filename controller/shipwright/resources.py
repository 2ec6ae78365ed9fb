"""The Shipwright and Tekton resources this controller reads and writes.

The generic runtime knows only core Kubernetes kinds (`controller.runtime.kube`);
the kinds of this domain are named here.
"""

from __future__ import annotations

from controller.runtime.kube import Resource

BUILDRUNS = Resource("shipwright.io", "v1beta1", "buildruns", "BuildRun")
BUILDS = Resource("shipwright.io", "v1beta1", "builds", "Build")
BUILDSTRATEGIES = Resource("shipwright.io", "v1beta1", "buildstrategies", "BuildStrategy")
TASKRUNS = Resource("tekton.dev", "v1", "taskruns", "TaskRun")
# BUILDRUN_EXECUTOR=PipelineRun runs each BuildRun as one of these instead.
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
# Cluster-scoped; a Build may name one (spec.strategy.kind: ClusterBuildStrategy).
CLUSTERBUILDSTRATEGIES = Resource("shipwright.io", "v1beta1", "clusterbuildstrategies",
                                  "ClusterBuildStrategy", namespaced=False)

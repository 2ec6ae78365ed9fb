"""The labels Shipwright v0.20 puts on BuildRuns and TaskRuns, spelled as Shipwright spells
them (pkg/apis/build/v1beta1: LabelBuildRun, LabelBuild and their generations).

Clients (`shp`, dashboards, `kubectl -l`) select by these, so each value is API.
"""

from __future__ import annotations

# On a TaskRun (and its pod): the BuildRun it runs, and that BuildRun's generation and uid.
LABEL_BUILDRUN = "buildrun.shipwright.io/name"
LABEL_BUILDRUN_GENERATION = "buildrun.shipwright.io/generation"
LABEL_BUILDRUN_UID = "buildrun.shipwright.io/uid"
# On a BuildRun of a Build, and its TaskRun: the Build and its metadata.generation.
LABEL_BUILD = "build.shipwright.io/name"
LABEL_BUILD_GENERATION = "build.shipwright.io/generation"

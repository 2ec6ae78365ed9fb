"""What a BuildRun runs as, generated: the Tekton TaskRun (`taskrun.py`) or PipelineRun
(`pipelinerun.py`) Shipwright v0.20 would create, both from the same phases
(`phases.py`), with the source step (`sources.py`), managed push
(`image_processing.py`), parameter values (`params.py`), the names and helpers they
share (`steps.py`) and Shipwright's settings (`config.py`). Shipwright keeps the same
apart from its reconciler, in pkg/reconciler/buildrun/resources.

Pure: no I/O. Beside this folder they read only the BuildRun's reasons, spec parsing and
status result names (`controller.buildrun.reasons`, `spec`, `status`), never the
reconciler's modules (tests/unit/test_layering.py).
"""

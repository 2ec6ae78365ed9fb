"""The results the generated TaskRun (and each task of the PipelineRun) declares, named as
Shipwright names them, beside the steps that write them; outcomes.py reads them back off
a finished run into the BuildRun's status.output, status.source and failureDetails.
Pure names."""

from __future__ import annotations

# Declared by every task (phases.base_task_spec). The image's digest, size and
# vulnerabilities: written by the image-processing step (image_processing.py), or by the
# strategy's own steps when it pushes itself.
RESULT_IMAGE_DIGEST = "shp-image-digest"
RESULT_IMAGE_SIZE = "shp-image-size"
RESULT_IMAGE_VULNERABILITIES = "shp-image-vulnerabilities"
# A failure's reason and message: written by the source step (sources.py) or by a
# strategy's step, and read from the failed step's termination message.
RESULT_ERROR_REASON = "shp-error-reason"
RESULT_ERROR_MESSAGE = "shp-error-message"
# The source step's (sources.py; Shipwright names its one source "default"): the Git
# clone's commit, author and branch, the OCI bundle's digest, and either's timestamp.
RESULT_SOURCE_COMMIT_SHA = "shp-source-default-commit-sha"
RESULT_SOURCE_COMMIT_AUTHOR = "shp-source-default-commit-author"
RESULT_SOURCE_BRANCH_NAME = "shp-source-default-branch-name"
RESULT_SOURCE_IMAGE_DIGEST = "shp-source-default-image-digest"
RESULT_SOURCE_TIMESTAMP = "shp-source-default-source-timestamp"

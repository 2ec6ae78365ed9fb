"""The real builds of the truth soak (soak.truth): Shipwright's buildah sample with
managed push (its image-processing step pushes), run on the real node
(devtools.cluster.realnode) from a repository of the node's Git server whose Dockerfiles
succeed, fail or outlast a timeout, each BuildRun pushing to its own tag.

    success      Dockerfile        builds and pushes
    failure      Dockerfile.fail   a RUN exits 3: Failed, nothing to push
    timeout      Dockerfile.slow   a RUN sleeps an hour; the BuildRun's spec.timeout ends it
    cancel-late  Dockerfile        cancelled once its build step has ended (the push under
                                   way or done), after a random delay: whichever happened
                                   first, the push or the stop, is the truth
    cancel-early Dockerfile        cancelled while its build step runs: nothing pushed,
                                   unless the build and its push end in the grace period
                                   Tekton's deletion of the pod gives its containers
    recreate     Dockerfile        deleted while it builds, or once its build step ended,
                                   and created again under the same name: a second
                                   BuildRun (uid), with a tag of its own

Every build is unique: the Dockerfiles write a build argument naming the BuildRun and its
attempt into the image, so no two BuildRuns can push the same digest. The sample Build
is changed as devtools.cluster.realbuilds.on_real_node changes it, and its Git source is
this repository; each BuildRun names its own output image and Dockerfile.
"""

from __future__ import annotations

from controller.runtime.errors import is_already_exists
from controller.runtime.kube import JSON, ApiError, Kube
from controller.shipwright.resources import BUILDS, CLUSTERBUILDSTRATEGIES
from devtools.cluster import fixtures, realbuilds
from devtools.cluster.polling import wait_until
from devtools.cluster.realnode import RealNode
from soak.ledger import ATTEMPT_LABEL, KIND_LABEL

SUCCESS, FAILURE, TIMEOUT, CANCEL_LATE, RECREATE, CANCEL_EARLY = (
    "success", "failure", "timeout", "cancel-late", "recreate", "cancel-early")
KINDS = (SUCCESS, FAILURE, TIMEOUT, CANCEL_LATE, RECREATE, CANCEL_EARLY)
# Kinds whose truth may be either: the push or the stop came first.
CANCELS = (CANCEL_LATE, CANCEL_EARLY)
DOCKERFILE = {SUCCESS: "Dockerfile", FAILURE: "Dockerfile.fail", TIMEOUT: "Dockerfile.slow",
              CANCEL_LATE: "Dockerfile", RECREATE: "Dockerfile", CANCEL_EARLY: "Dockerfile"}
REPOSITORY = "truth-soak"
BUILD = "truth"
ARG = "TRUTH_ID"


def repository_files(node: RealNode) -> dict[str, str]:
    """The sample's files (realbuilds.sample_files) and the three Dockerfiles."""
    files = realbuilds.sample_files(node)
    context = realbuilds.CONTEXT_DIR
    head = (f"FROM {node.base_image()}\nARG {ARG}\n"
            "COPY hello.sh /usr/local/bin/hello\n")
    files[f"{context}/Dockerfile"] = head + (
        f'RUN echo "{realbuilds.BUILD_LINE} (${ARG})" && echo "${ARG}" > /truth-id'
        " && chmod 755 /usr/local/bin/hello\n"
        'CMD ["/usr/local/bin/hello"]\n')
    files[f"{context}/Dockerfile.fail"] = head + (
        f'RUN echo "failing on purpose (${ARG})" && exit 3\n')
    files[f"{context}/Dockerfile.slow"] = head + (
        f'RUN echo "sleeping past the timeout (${ARG})" && sleep 3600\n')
    return files


async def setup(kube: Kube, node: RealNode, namespace: str, timeout: float = 120.0) -> None:
    """The sample strategy (cluster-wide, as written), the repository and the Build
    `BUILD` in `namespace`; returns once the controller has registered the Build."""
    (sample,) = realbuilds.shipwright_sample("build", realbuilds.BUILDAH_MANAGED_PUSH)
    try:
        await kube.create(CLUSTERBUILDSTRATEGIES, None, realbuilds.sample_strategy(sample))
    except ApiError as exc:
        if not is_already_exists(exc):
            raise
    node.create_repository(REPOSITORY, repository_files(node))
    build = realbuilds.on_real_node(node, sample, namespace, name=BUILD)
    build["spec"]["source"]["git"]["url"] = node.git_url(REPOSITORY)
    await kube.create(BUILDS, namespace, build)

    async def registered() -> bool:
        got = await kube.get(BUILDS, namespace, BUILD)
        return (got.get("status") or {}).get("registered") == "True"
    if not await wait_until(registered, timeout, 0.2):
        got = await kube.get(BUILDS, namespace, BUILD)
        raise TimeoutError(f"Build {BUILD} not registered after {timeout:.0f}s: "
                           f"{got.get('status')}")


def output_image(node: RealNode, namespace: str, name: str, attempt: int) -> str:
    """The tag a BuildRun pushes to: its name's repository, its attempt's tag."""
    return node.image(f"{namespace}/{name}", f"a{attempt}")


def buildrun(node: RealNode, namespace: str, name: str, kind: str, attempt: int, *,
             timeout: str | None = None) -> JSON:
    """BuildRun `name` of the Build, of `kind`, its `attempt`-th creation under that name:
    its own output tag, its Dockerfile, a build argument naming it."""
    spec: JSON = {
        "output": {"image": output_image(node, namespace, name, attempt), "insecure": True},
        "paramValues": [
            {"name": "dockerfile", "value": DOCKERFILE[kind]},
            {"name": "build-args", "values": [{"value": f"{ARG}={name}-a{attempt}"}]},
        ],
    }
    if timeout is not None:
        spec["timeout"] = timeout
    body = fixtures.buildrun(name, BUILD, **spec)
    body["metadata"]["labels"] = {KIND_LABEL: kind, ATTEMPT_LABEL: str(attempt)}
    return body

"""A ServedModel's Deployment and Service as built, and the phase and served checkpoint read
back from the Deployment's status: pure functions, no cluster."""

from typing import Any

from crucible_operator.facts import GPU
from crucible_operator.pods import PodOptions
from crucible_operator.served_pods import (
    ANNOTATION_CHECKPOINT,
    ANNOTATION_SPEC_HASH,
    LABEL_SERVED_MODEL,
    SERVE_PORT,
    build_deployment,
    build_service,
    url_of,
)
from crucible_operator.served_status import FAILED, PENDING, READY, ROLLING, observe

OPTIONS = PodOptions(
    api_url="http://api.crucible.svc:8080",
    token_secret="crucible-workload-token",
    default_image="crucible/workload:1",
    storage_claim="crucible-data",
    storage_path="/crucible-data",
    node_selector={"pool": "gpu"},
    workload_seccomp_profile="crucible/tool-sandbox.json",  # for workload pods only
)


def served_model(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "ServedModel",
        "metadata": {"name": "arith", "namespace": "team-a", "uid": "u-1", "generation": 1},
        "spec": {"checkpoint": {"id": 12}, **spec},
    }


def test_the_deployment_rolls_one_pod_at_a_time_and_serves_with_project_tokens() -> None:
    deployment = build_deployment(served_model(replicas=2, gpus=1), 12, "team-a", OPTIONS)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert spec["selector"]["matchLabels"] == {LABEL_SERVED_MODEL: "arith"}
    template = spec["template"]
    assert template["metadata"]["annotations"][ANNOTATION_CHECKPOINT] == "12"
    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # It runs no agent tools: the runtime's default profile, whatever workload pods get.
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"pool": "gpu"}
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:5] == ["python", "-m", "crucible", "serve", "12"]
    assert command[command.index("--project") + 1] == "team-a"
    assert command[command.index("--name") + 1] == "arith"  # clients ask for the resource
    assert "--crucible-tokens" in command
    assert container["resources"]["limits"][GPU] == "1"
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": SERVE_PORT}
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    env = {e["name"]: e for e in container["env"]}
    assert env["CRUCIBLE_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "crucible-workload-token"
    assert "value" not in env["CRUCIBLE_TOKEN"]  # no secret in the spec
    # The checkpoints' file:// paths are on the shared claim, read-only here.
    mount = next(m for m in container["volumeMounts"] if m["name"] == "storage")
    assert mount == {"name": "storage", "mountPath": "/crucible-data", "readOnly": True}


def test_a_new_checkpoint_changes_the_template_and_the_built_from_hash() -> None:
    body = served_model()
    first = build_deployment(body, 12, "team-a", OPTIONS)
    again = build_deployment(body, 12, "team-a", OPTIONS)
    newer = build_deployment(body, 13, "team-a", OPTIONS)
    hash_of = lambda d: d["metadata"]["annotations"][ANNOTATION_SPEC_HASH]  # noqa: E731
    assert hash_of(first) == hash_of(again)
    assert hash_of(first) != hash_of(newer)
    assert newer["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CHECKPOINT] == "13"
    assert "13" in newer["spec"]["template"]["spec"]["containers"][0]["command"]


def test_the_model_name_may_differ_from_the_resource_name() -> None:
    deployment = build_deployment(served_model(modelName="arith/v2"), 12, "team-a", OPTIONS)
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--name") + 1] == "arith/v2"


def test_the_service_fronts_the_pods_and_the_url_is_its_dns_name() -> None:
    service = build_service(served_model())
    assert service["spec"]["selector"] == {LABEL_SERVED_MODEL: "arith"}
    assert service["spec"]["ports"][0]["port"] == SERVE_PORT
    assert "clusterIP" not in service["spec"]  # a virtual IP, not headless: load-balanced
    assert url_of(served_model()) == f"http://arith.team-a.svc:{SERVE_PORT}/v1"


def deployment_status(checkpoint: int, generation: int = 1, **status: Any) -> dict[str, Any]:
    built = build_deployment(served_model(replicas=2), checkpoint, "team-a", OPTIONS)
    built["metadata"]["generation"] = generation
    built["status"] = {"observedGeneration": generation, **status}
    return built


def test_phases_read_from_the_deployment() -> None:
    assert observe(None, 2, None).phase == PENDING
    starting = observe(deployment_status(12, replicas=2, updatedReplicas=2), 2, None)
    assert (starting.phase, starting.serving) == (PENDING, None)
    settled = dict(replicas=2, updatedReplicas=2, readyReplicas=2, availableReplicas=2)
    ready = observe(deployment_status(12, **settled), 2, None)
    assert (ready.phase, ready.serving, ready.ready_replicas) == (READY, 12, 2)
    # Rolling to 13: a new pod ready beside the two old ones; the old checkpoint is what
    # every client may still get, so it is what is served.
    rolling = observe(
        deployment_status(
            13, generation=2, replicas=3, updatedReplicas=1, readyReplicas=3, availableReplicas=3
        ),
        2,
        12,
    )
    assert (rolling.phase, rolling.serving) == (ROLLING, 12)
    assert "from checkpoint 12 to 13" in rolling.message
    rolled = observe(deployment_status(13, generation=2, **settled), 2, 12)
    assert (rolled.phase, rolled.serving) == (READY, 13)
    # A spec the controller has not looked at yet is not settled, whatever the counts say.
    unseen = deployment_status(13, generation=2, **settled)
    unseen["status"]["observedGeneration"] = 1
    assert observe(unseen, 2, 12).phase == ROLLING


def test_a_roll_past_its_deadline_fails_with_the_controllers_message() -> None:
    stuck = deployment_status(
        13,
        replicas=3,
        updatedReplicas=1,
        readyReplicas=2,
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "arith-7d9" has timed out progressing.',
            }
        ],
    )
    seen = observe(stuck, 2, 12)
    assert (seen.phase, seen.serving) == (FAILED, 12)
    assert "timed out progressing" in seen.message

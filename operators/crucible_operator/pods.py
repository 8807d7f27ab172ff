"""Build the pods (and headless Service) of one attempt: pure functions of the custom
resource and the attempt, so they are unit-tested without a cluster.

One pod per node (TrainingRun), per replica (RolloutJob) or one (EvalJob), named
`<run>-a<attempt>-<rank>`. Several pods rendezvous through torchrun at rank 0's stable DNS
name, `<run>-a<attempt>-0.<run>.<namespace>.svc`, which the headless Service provides.

An online-RL TrainingRun with `config.online.generator: pod` has, after its trainer's
pod, `config.online.generators` generator pods (ranks 1 up), each with the trainer's
resources, running `python -m crucible.online_rl.generator_process --pod`: they write their
addresses to the attempt's directory on the shared volume, where the trainer finds them
(`online_rl/generator_endpoints.py`), and end when the trainer closes them. They are pods of
the attempt like any other: scheduled as one gang, and one evicted interrupts the attempt.
"""

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crucible.domain import contract
from crucible.domain.resources import GENERATOR_ENDPOINTS_ENV, GENERATOR_INDEX_ENV, POD_IP_ENV
from crucible_operator import naming
from crucible_operator.facts import GPU

WORKSPACE = "/workspace"  # the pod's scratch (an emptyDir), its CRUCIBLE_HOME
# Where the init container unpacks the run's code package (an emptyDir the workload container
# mounts read-only, first on its PYTHONPATH).
CODE_DIR = "/crucible-code"
CODE_VOLUME = "code"


@dataclass(frozen=True)
class PodOptions:
    """Operator-wide settings for the pods it creates."""

    api_url: str  # the control plane, as pods reach it
    # Secret (in each namespace) whose `token` key served models' pods use; a run's pods
    # read their run's own (naming.run_token_secret, run_tokens.py).
    token_secret: str
    default_image: str  # for specs without `image`
    # Storage every pod, the workers and the API reach, one of two kinds; the run's
    # checkpoints and the files it publishes go under runs/<run id>/ of it, where the next
    # pod, the evals and the workers read them. With neither, checkpoints stay in the pod's
    # scratch and do not outlive it.
    # A ReadWriteMany PersistentVolumeClaim (of that name in each run's namespace) mounted
    # at `storage_path` in every pod (the workers mount it at the same path):
    storage_claim: str | None = None
    storage_path: str = "/crucible-data"
    # Or object storage, `s3://bucket/prefix`, with the credentials (AWS_ACCESS_KEY_ID,
    # AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL...) in a Secret of that name in each run's
    # namespace, which pods take their environment from: no credential is in a pod's spec.
    storage_uri: str | None = None
    storage_secret: str | None = None
    # Where every workload pod goes, before its spec's own scheduling: e.g. a GPU node pool's
    # label, and its taints' keys (tolerated whatever their value and effect).
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerated_taints: tuple[str, ...] = ()
    grace_seconds: int = 300  # long enough to write a checkpoint after SIGTERM
    shm_limit: str | None = None  # /dev/shm size limit (memory-backed)
    run_as_user: int = 1000
    # A Localhost seccomp profile for workload pods, its path below the kubelet's seccomp
    # directory, instead of the runtime's default: the tool sandbox's (docs/agents.md,
    # "Tools in pods"), which also lets a process make a user and network namespace.
    # Served pods keep the default: they run no tools.
    workload_seccomp_profile: str | None = None


@dataclass(frozen=True)
class Shape:
    """How many pods an attempt has and what each one gets."""

    pods: int
    """The workload's pods (torchrun's nodes)."""

    gpus_per_pod: int
    processes_per_pod: int
    generators: int = 0
    """Generator pods beside them (`generator_pods`)."""

    @property
    def world(self) -> int:
        return self.pods * self.processes_per_pod

    @property
    def all_pods(self) -> int:
        return self.pods + self.generators


def generator_pods(spec: Mapping[str, Any]) -> int:
    """How many generator pods an online-RL TrainingRun's spec asks for (0: none)."""
    online = (spec.get("config") or {}).get("online") or {}
    if not isinstance(online, Mapping) or online.get("generator") != "pod":
        return 0
    return int(online.get("generators", 1))


def shape(kind: str, spec: Mapping[str, Any]) -> Shape:
    if kind == "TrainingRun":
        gpus = int(spec.get("gpusPerNode", 0))
        return Shape(
            int(spec.get("nodes", 1)),
            gpus,
            int(spec.get("processesPerNode") or gpus or 1),
            generator_pods(spec),
        )
    if kind == "RolloutJob":
        return Shape(int(spec.get("replicas", 1)), int(spec.get("gpusPerReplica", 0)), 1)
    return Shape(1, int(spec.get("gpus", 0)), 1)


@dataclass(frozen=True)
class Attempt:
    run_id: int
    number: int
    resume_from: int | None
    inputs: Mapping[str, Any] | None


def _command(kind: str, spec: Mapping[str, Any], sh: Shape, rank: int, master: str) -> list[str]:
    command = list(
        spec.get("command")
        or [
            "python",
            "-m",
            contract.reference_workload(naming.KIND_BY_NAME[kind].run_kind, dict(spec)),
        ]
    )
    command += list(spec.get("args") or [])
    if sh.world == 1:
        return command
    if Path(command[0]).name.startswith("python"):
        command = command[1:]  # torchrun takes `-m module` or a script
    return [
        "torchrun",
        f"--nnodes={sh.pods}",
        f"--node-rank={rank}",
        f"--nproc-per-node={sh.processes_per_pod}",
        f"--master-addr={master}",
        f"--master-port={naming.TORCHRUN_PORT}",
        *command,
    ]


def resources_of(spec: Mapping[str, Any], gpus: int) -> dict[str, Any]:
    wanted = spec.get("resources") or {}
    requests = {
        key: wanted[field]
        for field, key in (
            ("cpu", "cpu"),
            ("memory", "memory"),
            ("ephemeralStorage", "ephemeral-storage"),
        )
        if wanted.get(field)
    }
    limits: dict[str, Any] = {}
    if gpus:
        requests[GPU] = str(gpus)
        limits[GPU] = str(gpus)  # extended resources need limit == request
    if wanted.get("memory"):
        limits["memory"] = wanted["memory"]
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def tolerations_of(spec: Mapping[str, Any], gpus: int, options: PodOptions) -> list[dict[str, Any]]:
    tolerations = [dict(t) for t in (spec.get("scheduling") or {}).get("tolerations") or []]
    for key in options.tolerated_taints:
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists"})
    if gpus and not any(t.get("key") == GPU for t in tolerations):
        # GPU nodes are usually tainted so CPU pods stay off them; GPU pods tolerate it.
        tolerations.append({"key": GPU, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def labels(body: Mapping[str, Any], kind: str, attempt: int | None = None) -> dict[str, str]:
    meta = body["metadata"]
    spec = body.get("spec") or {}
    out = dict((spec.get("scheduling") or {}).get("queueLabels") or {})
    out.update(
        {
            naming.LABEL_RUN: meta["name"],
            naming.LABEL_RUN_UID: meta["uid"],
            naming.LABEL_KIND: naming.KIND_BY_NAME[kind].run_kind,
            naming.LABEL_ROLE: naming.KIND_BY_NAME[kind].role,
            naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
        }
    )
    if attempt is not None:
        out[naming.LABEL_ATTEMPT] = str(attempt)
    return out


KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"


def uses_gang_gate(spec: Mapping[str, Any]) -> bool:
    """Kueue admits queued pods with its own gate (and pod groups); ours would only add a
    second, disagreeing admission."""
    queue = (spec.get("scheduling") or {}).get("queueLabels") or {}
    return not any(key.startswith("kueue.x-k8s.io/") for key in queue)


def build_pods(
    body: Mapping[str, Any], kind: str, attempt: Attempt, options: PodOptions
) -> list[dict[str, Any]]:
    meta = body["metadata"]
    spec = body.get("spec") or {}
    name, namespace = meta["name"], meta["namespace"]
    sh = shape(kind, spec)
    scheduling = spec.get("scheduling") or {}
    master = f"{naming.pod_name(name, attempt.number, 0)}.{naming.service_name(name)}"
    master += f".{namespace}.svc"
    with_package = bool(spec.get("codePackage"))
    shared: dict[str, str] = {}
    if options.storage_claim:
        run_dir = f"{options.storage_path.rstrip('/')}/runs/{attempt.run_id}"
        checkpoint_uri = f"file://{run_dir}/checkpoints"
        shared["CRUCIBLE_OUTPUTS_DIR"] = f"{run_dir}/outputs"
    elif options.storage_uri:
        run_root = f"{options.storage_uri.rstrip('/')}/runs/{attempt.run_id}"
        checkpoint_uri = f"{run_root}/checkpoints"
        shared["CRUCIBLE_OUTPUTS_URI"] = f"{run_root}/outputs"
    else:
        checkpoint_uri = f"file://{WORKSPACE}/checkpoints"
    base_env = {
        "CRUCIBLE_API_URL": options.api_url,
        "CRUCIBLE_HOME": WORKSPACE,
        **contract.workload_env(
            run_id=attempt.run_id,
            spec=dict(spec),
            attempt=attempt.number,
            resume_from=attempt.resume_from,
            inputs=dict(attempt.inputs) if attempt.inputs is not None else None,
            checkpoint_uri=checkpoint_uri,
            termination_log=contract.KUBERNETES_TERMINATION_LOG,
            code_dir=CODE_DIR if with_package else None,
        ),
    }
    base_env = {**shared, **base_env}  # the spec's own env still wins
    if sh.generators and options.storage_claim:
        # Every pod of the attempt: the generators write their addresses here, the
        # trainer reads them (registration refuses generator pods without the claim).
        base_env[GENERATOR_ENDPOINTS_ENV] = (
            f"{options.storage_path.rstrip('/')}/runs/{attempt.run_id}/outputs/"
            f"generators/attempt-{attempt.number}"
        )
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", **size_limit(options.shm_limit)}},
        {"name": "workspace", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - a memory volume, by design
        {"name": "workspace", "mountPath": WORKSPACE},
    ]
    if options.storage_claim:
        volumes.append(
            {"name": "storage", "persistentVolumeClaim": {"claimName": options.storage_claim}}
        )
        mounts.append({"name": "storage", "mountPath": options.storage_path})
    if with_package:
        volumes.append({"name": CODE_VOLUME, "emptyDir": {}})
    pods = []
    for rank in range(sh.all_pods):
        generator = rank - sh.pods if rank >= sh.pods else None
        env = dict(base_env)
        if generator is not None:
            env[GENERATOR_INDEX_ENV] = str(generator)
        elif sh.world > 1:
            env.update(
                {
                    "MASTER_ADDR": master,
                    "MASTER_PORT": str(naming.TORCHRUN_PORT),
                    "NNODES": str(sh.pods),
                    "NODE_RANK": str(rank),
                    "NPROC_PER_NODE": str(sh.processes_per_pod),
                }
            )
        env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
        env_list.append(
            {
                "name": "CRUCIBLE_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {
                        "name": naming.run_token_secret(attempt.run_id),
                        "key": naming.RUN_TOKEN_KEY,
                    }
                },
            }
        )
        if generator is not None:
            env_list.append(
                {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
            )
        container_env: dict[str, Any] = {"env": env_list}
        if options.storage_uri and options.storage_secret:
            container_env["envFrom"] = [{"secretRef": {"name": options.storage_secret}}]
        image = spec.get("image") or options.default_image
        workload_mounts = mounts
        if with_package:
            workload_mounts = [
                *mounts,
                {"name": CODE_VOLUME, "mountPath": CODE_DIR, "readOnly": True},
            ]
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": options.grace_seconds,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "securityContext": pod_security(options, options.workload_seccomp_profile),
            "containers": [
                {
                    "name": naming.WORKLOAD_CONTAINER,
                    "image": image,
                    "command": (
                        _command(kind, spec, sh, rank, master)
                        if generator is None
                        else ["python", "-m", "crucible.online_rl.generator_process", "--pod"]
                    ),
                    **({"workingDir": spec["workingDir"]} if spec.get("workingDir") else {}),
                    **container_env,
                    "resources": resources_of(spec, sh.gpus_per_pod),
                    "volumeMounts": workload_mounts,
                    # The workload's last sentence, or the end of its log if it left none,
                    # goes into the container's status, and from there into the attempt.
                    "terminationMessagePath": contract.KUBERNETES_TERMINATION_LOG,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": container_security(),
                }
            ],
            "volumes": volumes,
            "tolerations": tolerations_of(spec, sh.gpus_per_pod, options),
        }
        if with_package:
            pod_spec["initContainers"] = [_code_container(image, container_env, mounts)]
        if sh.pods > 1:
            pod_spec["hostname"] = naming.pod_name(name, attempt.number, rank)
            pod_spec["subdomain"] = naming.service_name(name)
        if uses_gang_gate(spec):
            pod_spec["schedulingGates"] = [{"name": naming.GANG_GATE}]
        for name_in_spec, key in (
            ("priorityClassName", "priorityClassName"),
            ("schedulerName", "schedulerName"),
        ):
            if scheduling.get(name_in_spec):
                pod_spec[key] = scheduling[name_in_spec]
        selector = {**options.node_selector, **(scheduling.get("nodeSelector") or {})}
        if selector:
            pod_spec["nodeSelector"] = selector
        pod_labels = labels(body, kind, attempt.number)
        pod_labels[naming.LABEL_RANK] = str(rank)
        pod_annotations = dict(scheduling.get("podAnnotations") or {})
        if not uses_gang_gate(spec):
            # Kueue admits a pod group all or nothing: one group per attempt.
            pod_labels[KUEUE_POD_GROUP] = f"{name}-a{attempt.number}"
            pod_annotations[KUEUE_GROUP_COUNT] = str(sh.all_pods)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": naming.pod_name(name, attempt.number, rank),
                    "namespace": namespace,
                    "labels": pod_labels,
                    "annotations": pod_annotations,
                },
                "spec": pod_spec,
            }
        )
    return pods


def _code_container(
    image: str, container_env: Mapping[str, Any], mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The init container that fetches the run's code package (its artifact id is in the
    environment it shares with the workload, with the API's token and the storage's keys),
    checks its digest and unpacks it where the workload container finds it; a package that
    cannot be had fails the pod, with the reason in this container's termination message."""
    env = copy.deepcopy(dict(container_env))
    # Its own imports come from the image alone, never from the package it is unpacking.
    env["env"] = [e for e in env["env"] if e["name"] != "PYTHONPATH"]
    return {
        "name": naming.CODE_CONTAINER,
        "image": image,  # the workload's: its crucible, and a pull the node makes once
        "command": ["python", "-m", "crucible.fetch_code", "--into", CODE_DIR],
        **env,
        "volumeMounts": [*copy.deepcopy(mounts), {"name": CODE_VOLUME, "mountPath": CODE_DIR}],
        "terminationMessagePath": contract.KUBERNETES_TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security(),
    }


def pod_security(options: PodOptions, seccomp_profile: str | None = None) -> dict[str, Any]:
    """The pod's; `seccomp_profile`, a Localhost profile's path, in place of the runtime's
    default (the restricted Pod Security Standard allows either)."""
    profile = (
        {"type": "Localhost", "localhostProfile": seccomp_profile}
        if seccomp_profile
        else {"type": "RuntimeDefault"}
    )
    return {
        "runAsNonRoot": True,
        "runAsUser": options.run_as_user,
        "runAsGroup": options.run_as_user,
        "fsGroup": options.run_as_user,
        "seccompProfile": profile,
    }


def container_security() -> dict[str, Any]:
    """Every container's; with the pod's non-root user and seccomp profile, what the
    restricted Pod Security Standard asks."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def size_limit(limit: str | None) -> dict[str, str]:
    return {"sizeLimit": limit} if limit else {}


def build_service(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Headless, publishing not-ready pods: rendezvous starts before readiness."""
    meta = body["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": naming.service_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": labels(body, kind),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {naming.LABEL_RUN_UID: meta["uid"]},
            "ports": [{"name": "rendezvous", "port": naming.TORCHRUN_PORT}],
        },
    }

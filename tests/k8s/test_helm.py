"""The Helm chart (helm/crucible) on the real control plane: it lints and renders with each
values file under ci/, everything it renders passes the API server's dry run, it installs,
upgrades and uninstalls (leaving only the CRDs), the migration hook runs before anything
else, every pod runs restricted, each ServiceAccount may do exactly what its component
needs, and bad values fail with a message that says what to fix.

The fake kubelet (kwok) runs no containers: pods go Running and Ready by its Stage rules,
and the migration Job's pod is told to exit 0 through its annotations, so the hook
completes and `helm install --wait` returns as it would on a real cluster.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s import cluster_helpers as h

pytestmark = pytest.mark.k8s

CHART = h.REPO_ROOT / "helm" / "crucible"
VALUES = {p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*.yaml"))}
KOPF_CRD = CHART / "crds" / "kopf" / "kopf-peering.yaml"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"

# Schedules the chart's pods on the tainted fake GPU nodes (the only nodes there are), and
# has the fake kubelet finish the migration pod with exit code 0 after a moment, long
# enough for the test to see the hook Job before anything else exists.
ON_FAKE_NODES: dict[str, Any] = {
    component: {"tolerations": [h.GPU_TOLERATION]}
    for component in ("controlPlane", "operator", "worker", "beat", "migrations")
}
ON_FAKE_NODES["migrations"]["podAnnotations"] = {
    h.FAKE_EXIT_CODE: "0",
    h.FAKE_RUN_DURATION: "2s",
}
INLINE_STORES = {
    "database": {"url": "postgresql+psycopg://crucible:pw@db.example:5432/crucible"},
    "broker": {"url": "redis://:pw@redis.example:6379/0"},
}


helm = h.helm


def render(*args: str) -> list[dict[str, Any]]:
    out = helm("template", "crucible", str(CHART), *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kinds(docs: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for doc in docs:
        counts[doc["kind"]] = counts.get(doc["kind"], 0) + 1
    return counts


def values_file(tmp_path: Path, *layers: dict[str, Any]) -> str:
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            merged[key] = {**merged.get(key, {}), **value}
    path = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(merged))
    return str(path)


def pod_templates(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every workload object."""
    out = []
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            out.append(
                (f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"])
            )
    return out


@pytest.fixture(scope="module")
def kopf_crd(cluster: h.Cluster) -> None:
    """The chart's hand-written peering CRD, needed before a ClusterKopfPeering can be
    dry-run. Applying it is idempotent, and Helm skips CRDs that exist."""
    h.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(KOPF_CRD))
    h.kubectl(
        "wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev", "--timeout=30s"
    )


# --- rendering -------------------------------------------------------------------------


def test_lint_passes_with_every_values_file(cluster: h.Cluster) -> None:
    for name, path in VALUES.items():
        proc = helm("lint", str(CHART), "--strict", "-f", str(path), check=False)
        assert proc.returncode == 0, f"helm lint with ci/{name}: {proc.stdout}{proc.stderr}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # External stores from existing Secrets: no Secret of the chart's own, no stores.
        (
            "default",
            {
                "Deployment": 4,
                "Job": 1,
                "Secret": 0,
                "StatefulSet": 0,
                "Ingress": 0,
                "PodDisruptionBudget": 2,
                "ValidatingAdmissionPolicy": 1,
                "ValidatingAdmissionPolicyBinding": 1,
            },
        ),
        # Bundled stores, generated passwords, an Ingress, single replicas so no PDBs.
        (
            "trial",
            {"StatefulSet": 2, "Secret": 1, "Ingress": 1, "PodDisruptionBudget": 0},
        ),
        # The chart's Secret plus the migration hook's own; monitoring objects.
        (
            "monitoring",
            {"Secret": 2, "ServiceMonitor": 3, "PrometheusRule": 1, "ConfigMap": 2},
        ),
    ],
)
def test_each_values_file_renders_its_objects(
    cluster: h.Cluster, name: str, expected: dict[str, int]
) -> None:
    counts = kinds(render("-f", str(VALUES[name])))
    for kind, count in expected.items():
        assert counts.get(kind, 0) == count, f"ci/{name}: {kind} x{counts.get(kind, 0)}"
    for always in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount", "NetworkPolicy"):
        assert counts.get(always, 0) >= 3, f"ci/{name}: {always} x{counts.get(always, 0)}"
    assert counts["ClusterKopfPeering"] == 1


@pytest.mark.parametrize("name", sorted(VALUES))
def test_everything_rendered_passes_the_api_servers_dry_run(
    kopf_crd: None, namespace: str, name: str
) -> None:
    docs = render(
        "-f",
        str(VALUES[name]),
        "--namespace",
        namespace,
        "--include-crds",
        "--set",
        f"metrics.grafanaDashboard.namespace={namespace}",
    )
    # The Prometheus Operator's CRDs are not in the test cluster; their objects are checked
    # by test_alerts_and_dashboard_use_metrics_crucible_exports instead.
    served = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
    if name == "monitoring":
        assert len(served) == len(docs) - 4
    out = h.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": served}),
        namespace=namespace,
    )
    assert out.count("(server dry run)") == len(served), out


def test_without_database_or_broker_the_chart_says_what_to_set(cluster: h.Cluster) -> None:
    proc = helm("template", "crucible", str(CHART), check=False)
    assert proc.returncode != 0
    assert "no database: set database.existingSecret" in proc.stderr
    assert "postgresql.enabled=true" in proc.stderr
    proc = helm(
        "template", "crucible", str(CHART), "--set", "database.existingSecret=db", check=False
    )
    assert "no broker: set broker.existingSecret" in proc.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "controlPlane.replicas=two"], ["/controlPlane/replicas", "want integer"]),
        (["--set", "controlPlane.replica=2"], ["/controlPlane", "'replica' not allowed"]),
        (["--set", "worker.concurrency=0"], ["/worker/concurrency", "minimum"]),
        (["--set", "operator.peering.name=Crucible_Peering"], ["/operator/peering/name"]),
        (["--set", "image.pullPolicy=Sometimes"], ["/image/pullPolicy", "IfNotPresent"]),
        (["--set", "metrics.prometheusRule.apiErrorRatio=5"], ["apiErrorRatio", "maximum"]),
        (["--set", "postgresql.password=p@ss/word"], ["/postgresql/password"]),
        (["--set", "storage.uri=gs://bucket/x"], ["/storage/uri"]),
        (
            ["--set", "storage.uri=s3://bucket/x", "--set", "storage.claim=shared"],
            ['storage.claim ("shared") and storage.uri ("s3://bucket/x")', "set one"],
        ),
        (
            ["--set", "operator.workloadSeccompProfile=/var/lib/kubelet/seccomp/x.json"],
            ["/operator/workloadSeccompProfile", "does not match pattern"],
        ),
        (
            ["--set", "controlPlane.resources.requests=null"],
            ["/controlPlane/resources", "requests"],
        ),
        # A URL with the wrong scheme: the message names the value and the scheme only,
        # never the password in it.
        (
            ["--set", "database.url=postgres://crucible:hunter2@db:5432/crucible"],
            ["database.url must be a Postgres URL", '"postgres:"'],
        ),
        (
            ["--set", "broker.url=amqp://guest:hunter2@mq:5672//"],
            ["broker.url must be a Redis URL", '"amqp:"'],
        ),
    ],
)
def test_bad_values_are_rejected_with_a_clear_message(
    cluster: h.Cluster, args: list[str], expected: list[str]
) -> None:
    proc = helm(
        "template", "crucible", str(CHART), "-f", str(VALUES["default"]), *args, check=False
    )
    assert proc.returncode != 0, f"accepted: {args}"
    for fragment in expected:
        assert fragment in proc.stderr, proc.stderr
    assert "hunter2" not in proc.stderr


def test_object_storage_reaches_the_operator_and_its_keys_the_workers_and_the_api(
    cluster: h.Cluster,
) -> None:
    docs = render(
        "-f", str(VALUES["default"]), "--set", "storage.uri=s3://team/crucible",
        "--set", "storage.secret=s3-keys",
    )  # fmt: skip
    pods = dict(pod_templates(docs))
    operator = next(spec for name, spec in pods.items() if name.endswith("-operator"))
    args = operator["containers"][0]["args"]
    assert args[args.index("--storage-uri") + 1] == "s3://team/crucible"
    assert args[args.index("--storage-secret") + 1] == "s3-keys"
    keys = {"secretRef": {"name": "s3-keys"}}
    for name, spec in pods.items():
        env_from = spec["containers"][0].get("envFrom", [])
        # The operator only names the Secret in the pods it makes; it never holds the keys.
        wants = any(part in name for part in ("-control-plane", "-worker", "-beat"))
        assert (keys in env_from) == wants, (name, env_from)
        assert not any(v.get("persistentVolumeClaim") for v in spec.get("volumes", [])), name


def test_the_tool_sandboxs_seccomp_profile_reaches_the_operator_only_when_set(
    cluster: h.Cluster,
) -> None:
    def operator_args(*values: str) -> list[str]:
        pods = dict(pod_templates(render("-f", str(VALUES["default"]), *values)))
        operator = next(spec for name, spec in pods.items() if name.endswith("-operator"))
        return list(operator["containers"][0]["args"])

    assert "--workload-seccomp-profile" not in operator_args()
    args = operator_args("--set", "operator.workloadSeccompProfile=crucible/tool-sandbox.json")
    assert args[args.index("--workload-seccomp-profile") + 1] == "crucible/tool-sandbox.json"


def test_every_pod_runs_restricted_with_requests(cluster: h.Cluster) -> None:
    for name, path in VALUES.items():
        for what, spec in pod_templates(render("-f", str(path))):
            where = f"ci/{name} {what}"
            pod_sc = spec["securityContext"]
            assert pod_sc["runAsNonRoot"] is True, where
            assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert "emptyDir" in volumes["tmp"], where
            for container in spec["containers"]:
                sc = container["securityContext"]
                assert sc["allowPrivilegeEscalation"] is False, where
                assert sc["readOnlyRootFilesystem"] is True, where
                assert sc["capabilities"]["drop"] == ["ALL"], where
                assert {"cpu", "memory"} <= set(container["resources"]["requests"]), where
                mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
                assert mounts["/tmp"] == "tmp", where
            if what.startswith(("Job/", "StatefulSet/")):
                assert spec["automountServiceAccountToken"] is False, where


def test_migrations_run_first_as_a_hook(cluster: h.Cluster) -> None:
    only = ["--show-only", "templates/migrations.yaml"]
    (job,) = render("-f", str(VALUES["default"]), *only)
    assert job["kind"] == "Job"
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["db", "upgrade"]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CRUCIBLE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "crucible-database",
        "key": "database-url",
    }

    # An inline URL: the chart's Secret does not exist before pre-install hooks, so the
    # hook carries its own Secret, created first (lower weight).
    secret, job = render("-f", str(VALUES["monitoring"]), *only)
    assert secret["kind"] == "Secret"
    hook_weight = {
        d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in (secret, job)
    }
    assert hook_weight["Secret"] < hook_weight["Job"]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (
        env["CRUCIBLE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"]
        == secret["metadata"]["name"]
    )

    # The bundled Postgres only exists once the release does: a plain Job on install, the
    # hook again on upgrades.
    (job,) = render("-f", str(VALUES["trial"]), *only)
    assert "helm.sh/hook" not in job["metadata"].get("annotations", {})
    (job,) = render("-f", str(VALUES["trial"]), "--is-upgrade", *only)
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"


def test_alerts_and_dashboard_use_metrics_crucible_exports(cluster: h.Cluster) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from crucible import process_metrics
    from crucible.api.observability import ApiMetrics
    from crucible.workers import metrics  # noqa: F401  (its metrics join that registry)

    engine = create_engine("sqlite://")
    exported: set[str] = set()
    registries = [ApiMetrics(engine, sessionmaker(engine)).registry, process_metrics.REGISTRY]
    for registry in registries:
        for family in registry.collect():
            suffixes = {
                "counter": ["_total"],
                "histogram": ["_bucket", "_sum", "_count"],
            }.get(family.type, [""])
            exported.update(family.name + suffix for suffix in suffixes)

    docs = render("-f", str(VALUES["monitoring"]))
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "CrucibleRunsStuckScheduling",
        "CrucibleRecoveryGaveUp",
        "CrucibleOutboxLag",
        "CrucibleApiErrorRate",
        "CrucibleRunGpuIdle",
        "CrucibleRunNumericsSaturating",
    } <= set(alerts)
    assert 'phase="Scheduling"' in alerts["CrucibleRunsStuckScheduling"]
    (dashboard,) = [d for d in docs if d["kind"] == "ConfigMap" and "crucible.json" in d["data"]]
    panels = json.loads(dashboard["data"]["crucible.json"])["panels"]
    exprs = [*alerts.values(), *(t["expr"] for p in panels for t in p["targets"])]
    used = {name for expr in exprs for name in re.findall(r"\bcrucible_[a-z0-9_]+", expr)}
    assert used, exprs
    assert used <= exported, f"not exported by Crucible: {sorted(used - exported)}"


# --- on the cluster --------------------------------------------------------------------


@dataclass
class Release:
    name: str
    namespace: str
    hook_seen_first: bool
    """The migration Job existed while no Deployment of the release did."""


def install_watching_the_hook(name: str, namespace: str, values: str) -> Release:
    """`helm install --wait`, watching for the migration hook Job while it runs."""
    install = subprocess.Popen(
        [
            "helm",
            "install",
            name,
            str(CHART),
            "-n",
            namespace,
            "-f",
            values,
            "--wait",
            "--timeout",
            "120s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    hook_seen_first = False
    while install.poll() is None and not hook_seen_first:
        jobs = h.kubectl(
            "get",
            "jobs",
            "-l",
            f"{COMPONENT}=migrations",
            "-o",
            "name",
            namespace=namespace,
            check=False,
        )
        if jobs.strip():
            deployments = h.kubectl("get", "deployments", "-o", "name", namespace=namespace)
            hook_seen_first = not deployments.strip()
            break
        time.sleep(0.2)
    _, err = install.communicate(timeout=180)
    assert install.returncode == 0, f"helm install: {err}"
    return Release(name, namespace, hook_seen_first)


def uninstall(release: Release) -> None:
    helm(
        "uninstall",
        release.name,
        "-n",
        release.namespace,
        "--wait",
        "--timeout",
        "60s",
        check=False,
    )


@pytest.fixture(scope="module")
def installed(kopf_crd: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """A release with inline database and broker URLs and the admin token from an existing
    Secret, installed once for the checks that only read it."""
    namespace = h.create_namespace("helm")
    try:
        h.kubectl(
            "create",
            "secret",
            "generic",
            "admin",
            "--from-literal=admin-token=t0ken",
            namespace=namespace,
        )
        values = values_file(
            tmp_path_factory.mktemp("values"),
            ON_FAKE_NODES,
            INLINE_STORES,
            {
                "adminToken": {"existingSecret": "admin"},
                "operator": {"peering": {"name": namespace}},
            },
        )
        release = install_watching_the_hook("crucible", namespace, values)
        yield release
        uninstall(release)
    finally:
        h.delete_namespace(namespace)


def test_install_runs_the_migration_hook_first_then_everything_is_ready(installed: Release) -> None:
    ns = installed.namespace
    assert installed.hook_seen_first, "the migration Job must exist before any Deployment"
    # hook-succeeded: the Job and its Secret are gone once the migration has run.
    assert not h.kubectl(
        "get", "jobs,secrets", "-l", f"{COMPONENT}=migrations", "-o", "name", namespace=ns
    ).strip()
    deployments = {
        d["metadata"]["labels"][COMPONENT]: d
        for d in h.kubectl_json("get", "deployments", "-l", f"{INSTANCE}=crucible", namespace=ns)[
            "items"
        ]
    }
    assert set(deployments) == {"control-plane", "operator", "worker", "beat"}
    for component, deployment in deployments.items():
        assert deployment["status"].get("readyReplicas") == deployment["spec"]["replicas"], (
            component
        )
    assert deployments["operator"]["spec"]["replicas"] == 1
    assert deployments["operator"]["spec"]["strategy"]["type"] == "Recreate"
    assert deployments["beat"]["spec"]["strategy"]["type"] == "Recreate"
    peering = h.kubectl_json("get", "clusterkopfpeering", ns)
    assert peering["metadata"]["labels"][INSTANCE] == "crucible"

    # The live objects, as the API server stored them, keep the restricted contexts.
    for component, deployment in deployments.items():
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, component
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", component
        (container,) = spec["containers"]
        sc = container["securityContext"]
        assert (sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"]) == (False, True)
        assert sc["capabilities"]["drop"] == ["ALL"], component
    control_plane = deployments["control-plane"]["spec"]["template"]["spec"]["containers"][0]
    assert control_plane["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert control_plane["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in control_plane["env"]}
    assert env["CRUCIBLE_ADMIN_TOKEN"] == {"name": "admin", "key": "admin-token"}
    assert env["CRUCIBLE_DATABASE_URL"] == {"name": "crucible", "key": "database-url"}
    operator = deployments["operator"]["spec"]["template"]["spec"]["containers"][0]
    args = operator["args"]
    assert args[0] == "operator"
    assert args[args.index("--peering") + 1] == ns
    assert args[args.index("--token-secret") + 1] == "crucible-workload-token"
    assert operator["livenessProbe"]["httpGet"]["port"] == "health"


VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
CRS = ("trainingruns.crucible.dev", "rolloutjobs.crucible.dev", "evaljobs.crucible.dev")
WATCHED = (*CRS, "servedmodels.crucible.dev")
OPERATOR_ALLOWED: dict[str, set[str]] = {
    **{cr: {"get", "list", "watch", "patch", "update"} for cr in WATCHED},
    **{f"{cr}/status": {"get", "patch", "update"} for cr in WATCHED},
    **{f"{cr}/finalizers": {"update"} for cr in WATCHED},
    # A Sweep is followed and cancelled through the control plane; nothing is owned by it.
    "sweeps.crucible.dev": {"get", "list", "watch", "patch"},
    "sweeps.crucible.dev/status": {"patch"},
    "sweeps.crucible.dev/finalizers": set(),
    # A served model's pods come from its Deployment; deleting it is its owner's business.
    "deployments.apps": {"get", "list", "watch", "create", "patch"},
    "pods": {"get", "list", "watch", "create", "delete", "patch"},
    "services": {"get", "list", "watch", "create", "delete"},
    "events": {"create", "patch"},
    "events.events.k8s.io": {"create", "patch"},
    "nodes": {"get", "list", "watch"},
    "namespaces": {"get", "list", "watch"},
    "customresourcedefinitions.apiextensions.k8s.io": {"get", "list", "watch"},
    "clusterkopfpeerings.kopf.dev": {"get", "list", "watch", "patch"},
    # Create and delete: reading is allowed for the served models' token name alone
    # (checked below), and an admission policy limits what it may create and delete (each
    # run's token Secret, and that one).
    "secrets": {"create", "delete"},
}
# What a compromised operator must not reach.
NOTHING_ALLOWED = (
    "configmaps",
    "serviceaccounts",
    "pods/exec",
    "pods/log",
    "pods/eviction",
    "persistentvolumeclaims",
    "statefulsets.apps",
    "jobs.batch",
    "roles.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "leases.coordination.k8s.io",
)


def can_i(sa: str, verb: str, resource: str, namespace: str | None, name: str = "") -> bool:
    """`kubectl auth can-i` as the ServiceAccount; resource may carry a /subresource."""
    resource, _, subresource = resource.partition("/")
    args = ["auth", "can-i", verb, f"{resource}/{name}" if name else resource, f"--as={sa}"]
    args += [f"--subresource={subresource}"] if subresource else []
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    answer = h.kubectl_result(*args).stdout.strip()
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {answer!r}"
    return answer == "yes"


def access_reviews(sa: str, checks: list[tuple[str, str, str | None]]) -> list[bool]:
    """The API server's answers for (verb, resource, namespace or None for cluster-wide),
    as SubjectAccessReviews in one request each, created by a single kubectl: the same
    authorizer `kubectl auth can-i --as` asks, at a fraction of the processes."""
    namespace = sa.split(":")[2]
    reviews = []
    for verb, resource, where in checks:
        resource, _, subresource = resource.partition("/")
        name, _, group = resource.partition(".")
        attributes = {"verb": verb, "resource": name, "group": group, "subresource": subresource}
        if where:
            attributes["namespace"] = where
        reviews.append(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": sa,
                    "groups": [
                        "system:serviceaccounts",
                        f"system:serviceaccounts:{namespace}",
                        "system:authenticated",
                    ],
                    "resourceAttributes": attributes,
                },
            }
        )
    out = h.kubectl(
        "create",
        "-f",
        "-",
        "-o",
        "json",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": reviews}),
    )
    decoder, answers, at = json.JSONDecoder(), [], 0
    while at < len(out.rstrip()):
        review, at = decoder.raw_decode(out, at)
        answers.append(review["status"].get("allowed", False))
        while at < len(out) and out[at].isspace():
            at += 1
    assert len(answers) == len(checks)
    return answers


def permission_matrix(
    sa: str, allowed: dict[str, set[str]], denied_resources: tuple[str, ...], project: str
) -> list[str]:
    """Every (verb, resource) in a project namespace and cluster-wide; returns mismatches."""
    checks = [
        (verb, resource, where)
        for resource in (*allowed, *denied_resources)
        for verb in VERBS
        for where in (project, None)
    ]
    return [
        f"{verb} {resource} {'in ' + where if where else 'cluster-wide'}: "
        f"{'allowed' if got else 'denied'}"
        for (verb, resource, where), got in zip(checks, access_reviews(sa, checks), strict=True)
        if got != (verb in allowed.get(resource, set()))
    ]


def test_operator_may_do_exactly_what_it_needs(installed: Release) -> None:
    sa = f"system:serviceaccount:{installed.namespace}:crucible-operator"
    # The headline answers through `kubectl auth can-i --as`, as an administrator would ask.
    assert not can_i(sa, "get", "secrets", None), "the operator must not read Secrets anywhere"
    assert not can_i(sa, "list", "secrets", "default")
    assert not can_i(sa, "get", "secrets", "default", name="postgres-credentials")
    assert can_i(sa, "get", "secrets", "default", name="crucible-workload-token")
    assert not can_i(sa, "get", "secrets", "default", name="crucible-run-12-token")
    assert can_i(sa, "create", "pods", "default")
    assert can_i(sa, "patch", "trainingruns.crucible.dev/status", "default")
    assert not can_i(sa, "create", "trainingruns.crucible.dev", "default")
    # The whole matrix in one request.
    wrong = permission_matrix(sa, OPERATOR_ALLOWED, NOTHING_ALLOWED, project="default")
    escalations = [
        ("impersonate", "serviceaccounts"),
        ("bind", "clusterroles.rbac.authorization.k8s.io"),
        ("escalate", "clusterroles.rbac.authorization.k8s.io"),
    ]
    answers = access_reviews(sa, [(verb, resource, None) for verb, resource in escalations])
    wrong += [
        f"{verb} {resource}: allowed"
        for (verb, resource), got in zip(escalations, answers, strict=True)
        if got
    ]
    assert not wrong, "\n".join(wrong)


def test_operator_may_create_and_delete_only_token_secrets(installed: Release) -> None:
    ns = installed.namespace
    sa = f"system:serviceaccount:{ns}:crucible-operator"

    def create_as_operator(
        name: str,
        type_: str = "Opaque",
        *,
        data: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> str:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "annotations": annotations or {}},
            "type": type_,
            "data": data or {"token": "dG9rZW4="},
        }
        proc = h.kubectl_result(
            "create",
            "--dry-run=server",
            f"--as={sa}",
            "-n",
            installed.namespace,
            "-f",
            "-",
            input=json.dumps(secret),
        )
        return proc.stdout + proc.stderr

    # The policy takes a moment to be loaded after the install.
    denied = h.wait_for(
        lambda: "may only create" in (out := create_as_operator("db-credentials")) and out,
        timeout=30,
        message="the admission policy to deny a Secret of another name",
    )
    assert 'not Opaque Secret "db-credentials"' in denied
    for name in ("crucible-workload-token", "crucible-run-12-token"):
        stolen = create_as_operator(
            name,
            "kubernetes.io/service-account-token",
            annotations={"kubernetes.io/service-account.name": "default"},
        )
        assert "may only create Opaque Secrets" in stolen
        assert "created (server dry run)" in create_as_operator(name)
    assert "may only create" in create_as_operator("crucible-run-12-token-x")
    assert "may only create" in create_as_operator("crucible-run-x-token")
    extra = {"token": "dG9rZW4=", "aws-key": "a2V5"}
    assert "may only create" in create_as_operator("crucible-run-12-token", data=extra)

    # Deleting: a run's token Secret, nothing else (the Secrets exist: made by an admin).
    for name in ("db-credentials", "crucible-run-13-token"):
        h.kubectl("create", "secret", "generic", name, "--from-literal=k=v", namespace=ns)
    as_operator = ("delete", "secret", "--dry-run=server", f"--as={sa}", "-n", ns)
    kept = h.kubectl_result(*as_operator, "db-credentials")
    assert 'may only delete Secrets "crucible-run-<run id>-token", not "db-credentials"' in (
        kept.stderr
    )
    gone = h.kubectl_result(*as_operator, "crucible-run-13-token")
    assert gone.returncode == 0, gone.stderr


def test_control_plane_and_workers_may_only_touch_runs_and_promote(installed: Release) -> None:
    ns = installed.namespace
    control_plane = {"create", "get", "list", "patch", "delete"}
    worker = {"get", "list", "create", "patch"}
    expected: dict[str, dict[str, set[str]]] = {
        f"system:serviceaccount:{ns}:crucible-control-plane": dict.fromkeys(CRS, control_plane),
        # A promotion sets a ServedModel's spec.checkpoint; nothing else of it, nor its status.
        f"system:serviceaccount:{ns}:crucible-worker": {
            **dict.fromkeys(CRS, worker),
            "servedmodels.crucible.dev": {"get", "patch"},
        },
    }
    denied = (
        "secrets",
        "pods",
        "trainingruns.crucible.dev/status",
        "servedmodels.crucible.dev",
        "servedmodels.crucible.dev/status",
    )
    for sa, allowed in expected.items():
        wrong = permission_matrix(
            sa, allowed, tuple(r for r in denied if r not in allowed), project="default"
        )
        assert not wrong, f"{sa}:\n" + "\n".join(wrong)


def test_install_refuses_missing_secrets_and_absent_prometheus_operator(
    kopf_crd: None, namespace: str
) -> None:
    def dry_run(*args: str) -> str:
        proc = helm(
            "install",
            "crucible",
            str(CHART),
            "-n",
            namespace,
            "--dry-run=server",
            "-f",
            str(VALUES["default"]),
            *args,
            check=False,
        )
        assert proc.returncode != 0, proc.stdout
        return proc.stderr

    err = dry_run()
    assert (
        f'Secrets not found in namespace "{namespace}": adminToken.existingSecret '
        '("crucible-admin-token"), broker.existingSecret ("crucible-broker"), '
        'database.existingSecret ("crucible-database"); create them first'
    ) in err
    for name, key in (
        ("crucible-database", "database-url"),
        ("crucible-broker", "broker-url"),
        ("crucible-admin-token", "admin-token"),
    ):
        h.kubectl(
            "create", "secret", "generic", name, f"--from-literal={key}=x", namespace=namespace
        )
    err = dry_run("--set", "metrics.serviceMonitor.enabled=true")
    assert "need the monitoring.coreos.com/v1 API (Prometheus Operator)" in err


# Past its own waits: helm install, upgrade and uninstall.
@pytest.mark.timeout(480)
def test_trial_install_with_bundled_stores_then_upgrade_keeps_their_passwords(
    kopf_crd: None, namespace: str, tmp_path: Path
) -> None:
    stores = {
        store: {"enabled": True, "tolerations": [h.GPU_TOLERATION]}
        for store in ("postgresql", "redis")
    }
    stores["postgresql"]["persistence"] = {"enabled": False}  # no storage provisioner here
    values = values_file(
        tmp_path, ON_FAKE_NODES, stores, {"operator": {"peering": {"name": namespace}}}
    )
    helm(
        "install", "demo", str(CHART), "-n", namespace, "-f", values, "--wait", "--timeout", "120s"
    )
    try:
        for store in ("postgresql", "redis"):
            sts = h.kubectl_json(
                "get", "statefulset", f"demo-crucible-{store}", namespace=namespace
            )
            assert sts["status"].get("readyReplicas") == 1, store
            sc = sts["spec"]["template"]["spec"]["securityContext"]
            assert (sc["runAsNonRoot"], sc["runAsUser"]) == (True, 999), store
        # The database is part of the release, so the first migration is a plain Job.
        job = h.kubectl_json("get", "job", "demo-crucible-migrate-install", namespace=namespace)
        assert "helm.sh/hook" not in job["metadata"].get("annotations", {})
        secret = h.kubectl_json("get", "secret", "demo-crucible", namespace=namespace)["data"]
        assert set(secret) == {
            "admin-token",
            "broker-url",
            "database-url",
            "postgres-password",
            "redis-password",
        }
        helm(
            "upgrade",
            "demo",
            str(CHART),
            "-n",
            namespace,
            "--reuse-values",
            "--wait",
            "--timeout",
            "120s",
        )
        assert (
            h.kubectl_json("get", "secret", "demo-crucible", namespace=namespace)["data"] == secret
        )
        # Upgrades migrate through the hook; the install's Job is gone with revision 1.
        jobs = h.kubectl("get", "jobs", "-o", "name", namespace=namespace).split()
        assert jobs == []
        hooks = helm("get", "hooks", "demo", "-n", namespace).stdout
        assert "name: demo-crucible-migrate\n" in hooks
    finally:
        helm("uninstall", "demo", "-n", namespace, "--wait", check=False)


@functools.cache
def listable_types(namespaced: bool) -> str:
    types = h.kubectl(
        "api-resources", "--verbs=list", f"--namespaced={str(namespaced).lower()}", "-o", "name"
    ).split()
    return ",".join(t for t in types if t not in ("events", "events.events.k8s.io"))


def leftovers(release: Release) -> list[str]:
    """Every object labelled with the release, namespaced or cluster-scoped."""
    selector = f"{INSTANCE}={release.name}"
    return [
        *h.kubectl(
            "get", listable_types(True), "-l", selector, "-o", "name", namespace=release.namespace
        ).split(),
        *h.kubectl("get", listable_types(False), "-l", selector, "-o", "name").split(),
    ]


# Past its own waits: helm install, upgrade, uninstall, and the leftovers going.
@pytest.mark.timeout(480)
def test_upgrade_with_a_changed_value_then_uninstall_leaves_only_the_crds(
    kopf_crd: None, namespace: str, tmp_path: Path
) -> None:
    values = values_file(
        tmp_path, ON_FAKE_NODES, INLINE_STORES, {"operator": {"peering": {"name": namespace}}}
    )
    release = install_watching_the_hook("trial", namespace, values)
    try:
        before = h.kubectl_json("get", "deployment", "trial-crucible-worker", namespace=namespace)
        token = h.kubectl_json("get", "secret", "trial-crucible", namespace=namespace)["data"][
            "admin-token"
        ]
        helm(
            "upgrade",
            "trial",
            str(CHART),
            "-n",
            namespace,
            "--reuse-values",
            "--wait",
            "--timeout",
            "120s",
            "--set",
            "worker.replicas=3",
            "--set",
            "config.extraEnv.CRUCIBLE_LOG_LEVEL=debug",
        )
        after = h.kubectl_json("get", "deployment", "trial-crucible-worker", namespace=namespace)
        assert after["spec"]["replicas"] == 3
        assert after["status"]["readyReplicas"] == 3
        config = h.kubectl_json("get", "configmap", "trial-crucible-config", namespace=namespace)
        assert config["data"]["CRUCIBLE_LOG_LEVEL"] == "debug"
        # A settings change rolls the pods (the config checksum on the pod template).
        checksum = "checksum/config"
        assert (
            before["spec"]["template"]["metadata"]["annotations"][checksum]
            != after["spec"]["template"]["metadata"]["annotations"][checksum]
        )
        history = json.loads(helm("history", "trial", "-n", namespace, "-o", "json").stdout)
        assert [r["status"] for r in history] == ["superseded", "deployed"]
        # The generated admin token survives the upgrade.
        secret = h.kubectl_json("get", "secret", "trial-crucible", namespace=namespace)
        assert secret["data"]["admin-token"] == token
        assert leftovers(release)
    finally:
        uninstall(release)
    # Pods and ReplicaSets go by garbage collection, after `helm uninstall --wait` returns.
    remaining: list[str] = []

    def nothing_left() -> bool:
        remaining[:] = leftovers(release)
        return not remaining

    try:
        h.wait_for(nothing_left, timeout=60, interval=1, message="the release's objects to go")
    except TimeoutError:
        pytest.fail(f"left after helm uninstall: {remaining}")
    crds = h.kubectl("get", "crd", "-o", "name").split()
    assert "customresourcedefinition.apiextensions.k8s.io/clusterkopfpeerings.kopf.dev" in crds

"""Tie a custom resource to its run in the control plane, and a namespace to its project.

A resource applied with kubectl is registered by its uid (idempotent: a retried or repeated
registration returns the same run). One the control plane created itself for a REST
submission already has its run; registering it adopts that run. A namespace that no
project maps to yet gets a project named after it, so kubectl users need no set-up.
"""

import base64
from collections.abc import Mapping
from typing import Any

from lightkube import ApiError as KubeError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from crucible.client import ApiError, calls
from crucible.domain.enums import Backend, Role
from crucible.schemas.runs import RunPublic, RunSubmit
from crucible.schemas.tenancy import ProjectCreate, TokenCreate
from crucible_operator import pods
from crucible_operator.context import OperatorContext


class RegistrationRefused(Exception):
    """The control plane refused the resource (a name taken by another run, a spec it
    rejects): the resource is marked Failed with this message and left alone."""


async def learn_projects(ctx: OperatorContext) -> None:
    """Every project's namespace -> its name, all pages."""
    cursor = None
    while True:
        page = await ctx.call(calls.list_projects(cursor))
        for project in page.items:
            ctx.namespaces.projects[project.namespace] = project.name
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def project_for(ctx: OperatorContext, namespace: str) -> str:
    """The project whose namespace it is; a namespace no project owns becomes a project of
    its name. Refused when that name is taken by a project of another namespace: its runs
    must not land in a project that does not own the namespace."""
    projects = ctx.namespaces.projects
    cached = projects.get(namespace)
    if cached is not None:
        return cached
    await learn_projects(ctx)
    if namespace not in projects:
        try:
            project = await ctx.call(
                calls.create_project(ProjectCreate(name=namespace, namespace=namespace))
            )
            projects[namespace] = project.name
        except ApiError as exc:
            if exc.status != 409:
                raise
            await learn_projects(ctx)  # created by someone else meanwhile?
            if namespace not in projects:
                raise RegistrationRefused(
                    f"namespace {namespace!r} belongs to no project, and it cannot become one: "
                    f"{exc}. Create a project for it with `namespace: {namespace}`, or apply "
                    "the resource in its project's namespace"
                ) from exc
    return projects[namespace]


def manifest_of(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
        },
        "spec": dict(body.get("spec") or {}),
    }


async def register(ctx: OperatorContext, body: Mapping[str, Any]) -> RunPublic:
    meta = body["metadata"]
    if pods.generator_pods(body.get("spec") or {}) and not ctx.options.storage_claim:
        raise RegistrationRefused(
            "config.online.generator: pod needs the shared volume (the operator's "
            "storage claim): generator pods find the trainer and take each policy version "
            "through it, and this operator has none; use generator: process"
        )
    project = await project_for(ctx, meta["namespace"])
    try:
        submission = RunSubmit.model_validate(
            {
                "project": project,
                "manifest": manifest_of(body),
                "backend": Backend.kubernetes,
                "k8s_uid": meta["uid"],
                "tags": {"namespace": meta["namespace"]},
            }
        )
    except ValueError as exc:  # the CRD's schema let through what the API's models refuse
        raise RegistrationRefused(f"the spec is invalid: {exc}") from exc
    try:
        return await ctx.call(calls.submit_run(submission))
    except ApiError as exc:
        if exc.status in (409, 422):
            raise RegistrationRefused(str(exc)) from exc
        raise


async def ensure_token_secret(ctx: OperatorContext, namespace: str, project: str) -> None:
    """The Secret served models' pods read CRUCIBLE_TOKEN from: a project-scoped editor
    token, created once per namespace (a run's pods get one of the run's own, run_tokens.py).
    The operator may read only Secrets of this one name."""
    if namespace in ctx.namespaces.token_secrets:
        return
    name = ctx.options.token_secret
    try:
        await ctx.kube.get(Secret, name, namespace=namespace)
    except KeyError:
        pass
    except KubeError as exc:
        if exc.status.code != 404:
            raise
        token = await ctx.call(
            calls.create_token(
                TokenCreate(
                    name=f"workloads in namespace {namespace}", project=project, role=Role.editor
                )
            )
        )
        secret = Secret(
            metadata=ObjectMeta(
                name=name,
                namespace=namespace,
                labels={"app.kubernetes.io/managed-by": "crucible-operator"},
            ),
            type="Opaque",
            data={"token": base64.b64encode(token.token.encode()).decode()},
        )
        try:
            await ctx.kube.create(secret)
        except KubeError as create_error:
            if create_error.status.code != 409:
                raise
    ctx.namespaces.token_secrets.add(namespace)

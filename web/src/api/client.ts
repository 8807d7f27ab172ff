import createClient, { type Middleware } from 'openapi-fetch';

import { clearToken, getToken } from '../auth';
import type { components, paths } from './schema';

export type Schemas = components['schemas'];
export type Run = Schemas['RunPublic'];
export type Attempt = Schemas['AttemptPublic'];
export type RunEvent = Schemas['RunEventPublic'];
export type Project = Schemas['ProjectPublic'];
export type Experiment = Schemas['ExperimentPublic'];
export type MetricSeries = Schemas['MetricSeriesPublic'];
export type Checkpoint = Schemas['CheckpointPublic'];
export type EvalResult = Schemas['EvalResultPublic'];
export type RunGoodput = Schemas['RunGoodput'];
export type LineageGraph = Schemas['LineageGraph'];
export type LineageNode = Schemas['LineageNode'];
export type LineageEdge = Schemas['LineageEdgePublic'];
export type LineageNodeType = Schemas['NodeType'];
export type Phase = Run['phase'];
export type RunKind = Run['kind'];

/** A failed API call, carrying the server's `detail` as the message. */
export class ApiError extends Error {
  readonly status: number;

  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

const auth: Middleware = {
  onRequest({ request }) {
    const token = getToken();
    if (token) request.headers.set('Authorization', `Bearer ${token}`);
    return request;
  },
  onResponse({ response }) {
    // A revoked or expired token: drop it so the app falls back to the sign-in page.
    if (response.status === 401) clearToken();
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: window.location.origin });
api.use(auth);

function describe(detail: unknown): string {
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((item: { msg?: string; loc?: unknown[] }) =>
        [item.loc?.join('.'), item.msg].filter(Boolean).join(': '),
      )
      .join('; ');
  }
  return JSON.stringify(detail);
}

/** The body of a successful call, or an ApiError with the server's explanation. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || result.data === undefined) {
    const body = result.error as { detail?: unknown } | undefined;
    const message =
      body?.detail !== undefined
        ? describe(body.detail)
        : `${result.response.status} ${result.response.statusText}`;
    throw new ApiError(result.response.status, message);
  }
  return result.data;
}
export type ClusterView = Schemas['ClusterView'];
export type ClusterNode = Schemas['NodePublic'];
export type RunPod = Schemas['RunPodPublic'];
export type WaitingRun = Schemas['WaitingRun'];
export type Deployment = Schemas['DeploymentPublic'];
export type CheckpointBrief = Schemas['CheckpointBrief'];

import { useSyncExternalStore } from 'react';

import type { LineageNodeType } from './api/client';

// A hash router: the dashboard is served as static files at `/`, so `#/runs/7` needs no
// server-side fallback route.
export type Route =
  | { page: 'signin'; code?: string }
  | { page: 'projects' }
  | { page: 'project'; id: number }
  | { page: 'submit'; projectId: number; start: SubmitStart }
  | { page: 'experiment'; id: number; search: string }
  | { page: 'run'; id: number }
  | { page: 'profileTrace'; runId: number; name: string }
  | { page: 'checkpoint'; id: number }
  | { page: 'lineage'; node: { type: LineageNodeType; id: number } }
  | { page: 'compare'; runs: number[] }
  | { page: 'sweep'; id: number }
  | { page: 'cluster' }
  | { page: 'deployments' }
  | { page: 'notFound'; path: string };

/** What the submit page's editor starts from: a new run or sweep from a template, a run's
 * manifest to resubmit under a new name, or the submission that reproduces a run. */
export type SubmitStart =
  | { from: 'run' }
  | { from: 'sweep' }
  | { from: 'resubmit'; runId: number }
  | { from: 'reproduce'; runId: number };

function submitStart(search: string): SubmitStart | null {
  const query = new URLSearchParams(search);
  if ([...query.keys()].length === 0) return { from: 'run' };
  if (query.get('template') === 'sweep') return { from: 'sweep' };
  for (const from of ['resubmit', 'reproduce'] as const) {
    const id = query.get(from);
    if (id && /^\d+$/.test(id)) return { from, runId: Number(id) };
  }
  return null;
}

const NODE_TYPES: readonly LineageNodeType[] = ['run', 'checkpoint', 'dataset_version', 'eval_result', 'artifact'];

function isNodeType(value: string): value is LineageNodeType {
  return (NODE_TYPES as readonly string[]).includes(value);
}

export function parseRoute(hash: string): Route {
  const [path = '/', search = ''] = (hash.replace(/^#/, '') || '/').split('?', 2);
  if (path === '/') return { page: 'projects' };
  if (path === '/cluster') return { page: 'cluster' };
  if (path === '/deployments') return { page: 'deployments' };
  if (path === '/signin') {
    const code = new URLSearchParams(search).get('code');
    return code ? { page: 'signin', code } : { page: 'signin' };
  }
  const match = /^\/(projects|experiments|runs|checkpoints|sweeps)\/(\d+)$/.exec(path);
  if (match) {
    const id = Number(match[2]);
    if (match[1] === 'projects') return { page: 'project', id };
    if (match[1] === 'experiments') return { page: 'experiment', id, search };
    if (match[1] === 'checkpoints') return { page: 'checkpoint', id };
    if (match[1] === 'sweeps') return { page: 'sweep', id };
    return { page: 'run', id };
  }
  const submit = /^\/projects\/(\d+)\/submit$/.exec(path);
  const start = submit ? submitStart(search) : null;
  if (submit && start) return { page: 'submit', projectId: Number(submit[1]), start };
  // The profile's name as the API spells it (rank<R>-steps<A>-<B>); nothing else reaches its URL.
  const trace = /^\/runs\/(\d+)\/profiles\/(rank\d+-steps\d+-\d+)$/.exec(path);
  if (trace?.[2]) return { page: 'profileTrace', runId: Number(trace[1]), name: trace[2] };
  const lineage = /^\/lineage\/([a-z_]+)\/(\d+)$/.exec(path);
  if (lineage?.[1] && isNodeType(lineage[1])) {
    return { page: 'lineage', node: { type: lineage[1], id: Number(lineage[2]) } };
  }
  if (path === '/compare') {
    const ids = (new URLSearchParams(search).get('runs') ?? '').split(',').filter(Boolean);
    if (ids.length > 0 && ids.every((id) => /^\d+$/.test(id))) {
      return { page: 'compare', runs: [...new Set(ids.map(Number))] };
    }
  }
  return { page: 'notFound', path: search ? `${path}?${search}` : path };
}

export const href = {
  projects: () => '#/',
  signIn: () => '#/signin',
  project: (id: number) => `#/projects/${id}`,
  submit: (projectId: number, start: SubmitStart = { from: 'run' }) =>
    `#/projects/${projectId}/submit${
      start.from === 'run' ? '' : start.from === 'sweep' ? '?template=sweep' : `?${start.from}=${start.runId}`
    }`,
  experiment: (id: number, search = '') => `#/experiments/${id}${search ? `?${search}` : ''}`,
  run: (id: number) => `#/runs/${id}`,
  profileTrace: (runId: number, name: string) => `#/runs/${runId}/profiles/${encodeURIComponent(name)}`,
  checkpoint: (id: number) => `#/checkpoints/${id}`,
  lineage: (type: LineageNodeType, id: number) => `#/lineage/${type}/${id}`,
  compare: (runs: number[]) => `#/compare?runs=${runs.join(',')}`,
  sweep: (id: number) => `#/sweeps/${id}`,
  cluster: () => '#/cluster',
  deployments: () => '#/deployments',
};

export function navigate(to: string): void {
  window.location.hash = to.replace(/^#/, '');
}

function subscribe(onChange: () => void): () => void {
  window.addEventListener('hashchange', onChange);
  return () => window.removeEventListener('hashchange', onChange);
}

export function useHash(): string {
  return useSyncExternalStore(subscribe, () => window.location.hash);
}

import { useSyncExternalStore } from 'react';

// A hash router: the dashboard is served as static files at `/`, so `#/runs/7` needs no
// server-side fallback route.
export type Route =
  | { page: 'signin' }
  | { page: 'projects' }
  | { page: 'project'; id: number }
  | { page: 'experiment'; id: number }
  | { page: 'run'; id: number }
  | { page: 'notFound'; path: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, '') || '/';
  if (path === '/') return { page: 'projects' };
  if (path === '/signin') return { page: 'signin' };
  const match = /^\/(projects|experiments|runs)\/(\d+)$/.exec(path);
  if (match) {
    const id = Number(match[2]);
    if (match[1] === 'projects') return { page: 'project', id };
    if (match[1] === 'experiments') return { page: 'experiment', id };
    return { page: 'run', id };
  }
  return { page: 'notFound', path };
}

export const href = {
  projects: () => '#/',
  signIn: () => '#/signin',
  project: (id: number) => `#/projects/${id}`,
  experiment: (id: number) => `#/experiments/${id}`,
  run: (id: number) => `#/runs/${id}`,
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

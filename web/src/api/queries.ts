import { useQuery } from '@tanstack/react-query';

import { api, unwrap } from './client';

// Lookups several pages share, under one query key each so they are fetched once.

export function useProject(id: number | undefined) {
  return useQuery({
    queryKey: ['project', id],
    enabled: id !== undefined,
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/projects/{project_id}', { params: { path: { project_id: id ?? 0 } } }),
      ),
  });
}

export function useExperiment(id: number | undefined) {
  return useQuery({
    queryKey: ['experiment', id],
    enabled: id !== undefined,
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/experiments/{experiment_id}', {
          params: { path: { experiment_id: id ?? 0 } },
        }),
      ),
  });
}

export function useRun(id: number | undefined) {
  return useQuery({
    queryKey: ['run', id],
    enabled: id !== undefined,
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id: id ?? 0 } } })),
  });
}

export function useCluster() {
  return useQuery({
    queryKey: ['cluster'],
    queryFn: async () => unwrap(await api.GET('/api/v1/cluster')),
  });
}

/** Every metric key a run logged, with its last point: which charts and sections it has. */
export function useMetricKeys(runId: number, live: boolean) {
  return useQuery({
    queryKey: ['metric-keys', runId],
    // As often as the charts: a key a live run starts logging shows up at the next refresh.
    refetchInterval: live ? 10_000 : false,
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/runs/{run_id}/metrics/keys', { params: { path: { run_id: runId } } })),
  });
}

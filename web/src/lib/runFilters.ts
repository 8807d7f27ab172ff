import type { Phase, RunKind } from '../api/client';

export const PHASES: Phase[] = [
  'Pending',
  'WaitingForInputs',
  'Scheduling',
  'Running',
  'Interrupted',
  'Recovering',
  'Succeeded',
  'Failed',
  'Cancelled',
];
export const KINDS: RunKind[] = ['train', 'rollout', 'eval'];

/** The columns the API sorts by (GET /api/v1/runs `sort`). */
export type SortKey = 'created_at' | 'name' | 'phase';

export interface RunFilters {
  phase: Phase | '';
  kind: RunKind | '';
  sort: SortKey;
  descending: boolean;
}

export const DEFAULT_FILTERS: RunFilters = { phase: '', kind: '', sort: 'created_at', descending: true };

/** The list-runs query for an experiment's table; an empty filter is left out, not sent as "". */
export function runsQuery(experimentId: number, filters: RunFilters) {
  return {
    experiment_id: experimentId,
    sort: filters.sort,
    descending: filters.descending,
    ...(filters.phase ? { phase: filters.phase } : {}),
    ...(filters.kind ? { kind: filters.kind } : {}),
  };
}

/**
 * Clicking a column header: the same column flips its order; a new one starts newest first
 * for time and A→Z for names and phases.
 */
export function toggleSort(filters: RunFilters, sort: SortKey): RunFilters {
  if (filters.sort === sort) return { ...filters, descending: !filters.descending };
  return { ...filters, sort, descending: sort === 'created_at' };
}

/** aria-sort for a header, so a screen reader says which column orders the table. */
export function ariaSort(filters: RunFilters, sort: SortKey): 'ascending' | 'descending' | 'none' {
  if (filters.sort !== sort) return 'none';
  return filters.descending ? 'descending' : 'ascending';
}

/** Selected run ids after ticking or unticking one; at most `limit`, the oldest pick dropped. */
export function toggleSelected(selected: number[], id: number, limit = 8): number[] {
  if (selected.includes(id)) return selected.filter((other) => other !== id);
  return [...selected, id].slice(-limit);
}

/** The filters as the hash's query (`phase=Failed&sort=name&order=asc`), defaults left out. */
export function filtersToSearch(filters: RunFilters): string {
  const params = new URLSearchParams();
  if (filters.phase) params.set('phase', filters.phase);
  if (filters.kind) params.set('kind', filters.kind);
  if (filters.sort !== DEFAULT_FILTERS.sort) params.set('sort', filters.sort);
  if (filters.descending !== (filters.sort === 'created_at')) params.set('order', filters.descending ? 'desc' : 'asc');
  return params.toString();
}

/** The filters a link carries; anything unknown falls back to the default, never an error. */
export function filtersFromSearch(search: string): RunFilters {
  const params = new URLSearchParams(search);
  const phase = PHASES.find((p) => p === params.get('phase')) ?? '';
  const kind = KINDS.find((k) => k === params.get('kind')) ?? '';
  const sorts: SortKey[] = ['created_at', 'name', 'phase'];
  const sort = sorts.find((s) => s === params.get('sort')) ?? DEFAULT_FILTERS.sort;
  const order = params.get('order');
  const descending = order === 'desc' ? true : order === 'asc' ? false : sort === 'created_at';
  return { phase, kind, sort, descending };
}

import { useInfiniteQuery, useQueries, useQuery } from '@tanstack/react-query';
import { useEffect, useRef, useState, type UIEvent } from 'react';

import { api, unwrap, type Phase, type RunKind, type Schemas } from '../api/client';
import { useExperiment, useProject } from '../api/queries';
import { PhaseBadge } from '../components/PhaseBadge';
import { Empty, ErrorBox, Loading } from '../components/states';
import { age, duration, orDash, percent, score } from '../format';
import {
  ariaSort,
  DEFAULT_FILTERS,
  filtersFromSearch,
  filtersToSearch,
  KINDS,
  PHASES,
  runsQuery,
  toggleSelected,
  toggleSort,
  type RunFilters,
  type SortKey,
} from '../lib/runFilters';
import { needsMore, visibleRows } from '../lib/virtual';
import { href, navigate } from '../router';

const PAGE_SIZE = 100;
const ROW_HEIGHT = 37; // px; styles.css gives .runs rows this height so the arithmetic holds
const VIEWPORT_HEIGHT = 640;

/** An experiment's runs; the filters live in the link (`search`), so Back and a shared link keep them. */
export function Experiment({ id, search }: { id: number; search: string }) {
  const experiment = useExperiment(id);
  const project = useProject(experiment.data?.project_id);
  const filters = filtersFromSearch(search);
  const [selected, setSelected] = useState<number[]>([]);
  const [scrollTop, setScrollTop] = useState(0);
  const viewport = useRef<HTMLDivElement>(null);
  const goodput = useQuery({
    queryKey: ['experiment-goodput', id],
    refetchInterval: 30_000,
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/experiments/{experiment_id}/goodput', { params: { path: { experiment_id: id } } })),
  });

  // Pages come from the API's cursor as the table is scrolled; only the rows in view are in
  // the DOM, so 10,000 runs cost what 40 do.
  const runs = useInfiniteQuery({
    queryKey: ['runs', id, filters],
    // Refetching re-reads every loaded page, so only a table scrolled a little way stays live.
    refetchInterval: (query) => ((query.state.data?.pages.length ?? 0) <= 2 ? 15_000 : false),
    queryFn: async ({ pageParam }: { pageParam: string | undefined }) =>
      unwrap(
        await api.GET('/api/v1/runs', {
          params: { query: { ...runsQuery(id, filters), cursor: pageParam, limit: PAGE_SIZE } },
        }),
      ),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.next_cursor ?? undefined,
  });

  const rows = runs.data?.pages.flatMap((page) => page.items) ?? [];
  // Goodput and best eval come from one call per page of the table, fetched as pages load.
  const summaries = useQueries({
    queries: (runs.data?.pages ?? []).map((page) => {
      const ids = page.items.map((run) => run.id);
      return {
        queryKey: ['run-summaries', ids],
        enabled: ids.length > 0,
        staleTime: 15_000,
        queryFn: async () =>
          unwrap(await api.GET('/api/v1/run-summaries', { params: { query: { ids } } })),
      };
    }),
    combine: (results) =>
      new Map<number, Schemas['RunSummary']>(
        results.flatMap((result) => result.data ?? []).map((summary) => [summary.run_id, summary]),
      ),
  });
  const { start, end } = visibleRows(scrollTop, VIEWPORT_HEIGHT, ROW_HEIGHT, rows.length);
  const { hasNextPage, isFetchingNextPage, fetchNextPage } = runs;
  const wantMore = needsMore(end, rows.length);

  useEffect(() => {
    if (wantMore && hasNextPage && !isFetchingNextPage) void fetchNextPage();
  }, [wantMore, hasNextPage, isFetchingNextPage, fetchNextPage]);

  function change(next: RunFilters) {
    navigate(href.experiment(id, filtersToSearch(next)));
    setScrollTop(0);
    viewport.current?.scrollTo({ top: 0 });
  }

  function onScroll(event: UIEvent<HTMLDivElement>) {
    setScrollTop(event.currentTarget.scrollTop);
  }

  function header(label: string, sort: SortKey, className?: string) {
    const order = ariaSort(filters, sort);
    return (
      <th aria-sort={order} className={className}>
        <button type="button" className="sort" onClick={() => change(toggleSort(filters, sort))}>
          {label}
          <span aria-hidden="true">{order === 'ascending' ? ' ▲' : order === 'descending' ? ' ▼' : ''}</span>
        </button>
      </th>
    );
  }

  if (experiment.isError) return <ErrorBox error={experiment.error} retry={() => void experiment.refetch()} />;
  const filtered = filters.phase !== '' || filters.kind !== '';
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> /{' '}
        {experiment.data ? (
          <a href={href.project(experiment.data.project_id)}>{project.data?.name ?? 'project'}</a>
        ) : (
          '…'
        )}{' '}
        / {experiment.data?.name ?? '…'}
      </nav>
      <h1>{experiment.data?.name ?? 'Experiment'}</h1>
      {experiment.data?.description && <p>{experiment.data.description}</p>}
      {goodput.data && goodput.data.goodput !== null && (
        <p className="muted" aria-label="Experiment goodput">
          Goodput {percent(goodput.data.goodput)} over {goodput.data.runs} {goodput.data.runs === 1 ? 'run' : 'runs'} that ran:{' '}
          {duration(goodput.data.work_lost_device_s)} of device time lost to interruptions,{' '}
          {duration(goodput.data.restart_overhead_device_s)} waiting to restart.
        </p>
      )}

      <div className="toolbar" role="search" aria-label="Filter runs">
        <label>
          Phase
          <select value={filters.phase} onChange={(event) => change({ ...filters, phase: event.target.value as Phase | '' })}>
            <option value="">any</option>
            {PHASES.map((phase) => (
              <option key={phase}>{phase}</option>
            ))}
          </select>
        </label>
        <label>
          Kind
          <select value={filters.kind} onChange={(event) => change({ ...filters, kind: event.target.value as RunKind | '' })}>
            <option value="">any</option>
            {KINDS.map((kind) => (
              <option key={kind}>{kind}</option>
            ))}
          </select>
        </label>
        {filtered && (
          <button type="button" className="link" onClick={() => change({ ...DEFAULT_FILTERS, sort: filters.sort, descending: filters.descending })}>
            Clear filters
          </button>
        )}
        <span className="spacer" />
        <span className="muted" role="status">
          {rows.length.toLocaleString()} {hasNextPage ? 'loaded, more as you scroll' : rows.length === 1 ? 'run' : 'runs'}
        </span>
        <button type="button" disabled={selected.length < 2} onClick={() => navigate(href.compare(selected))}>
          Compare {selected.length > 0 ? `${selected.length} ` : ''}runs
        </button>
        {selected.length > 0 && (
          <button type="button" className="link" onClick={() => setSelected([])}>
            Clear selection
          </button>
        )}
      </div>

      {runs.isPending && <Loading what="runs" />}
      {runs.isError && <ErrorBox error={runs.error} retry={() => void runs.refetch()} />}
      {runs.isSuccess && rows.length === 0 && (
        <Empty>
          {filtered ? (
            <>No runs match these filters. Clear them to see every run of the experiment.</>
          ) : (
            <>
              No runs in this experiment yet. Submit one with <code>crucible submit run.yaml</code>.
            </>
          )}
        </Empty>
      )}
      {rows.length > 0 && (
        <div
          className="table-viewport"
          ref={viewport}
          onScroll={onScroll}
          style={{ maxHeight: VIEWPORT_HEIGHT }}
          tabIndex={0}
          aria-label="Runs, scrollable"
        >
          <table className="runs" aria-label="Runs" aria-rowcount={hasNextPage ? -1 : rows.length + 1}>
            <thead>
              <tr>
                <th>
                  <span className="visually-hidden">Select</span>
                </th>
                {header('Name', 'name')}
                <th>Kind</th>
                {header('Phase', 'phase')}
                <th className="num">Attempt</th>
                <th className="num">GPUs</th>
                <th className="num">Latest step</th>
                <th className="num">Best eval</th>
                <th className="num">Goodput</th>
                {header('Age', 'created_at', 'num')}
              </tr>
            </thead>
            <tbody>
              {start > 0 && <tr className="spacer-row" style={{ height: start * ROW_HEIGHT }} aria-hidden="true" />}
              {rows.slice(start, end).map((run, offset) => (
                <tr key={run.id} aria-rowindex={start + offset + 2} className={selected.includes(run.id) ? 'selected' : undefined}>
                  <td>
                    <input
                      type="checkbox"
                      aria-label={`Select ${run.name}`}
                      checked={selected.includes(run.id)}
                      onChange={() => setSelected((current) => toggleSelected(current, run.id))}
                    />
                  </td>
                  <td>
                    <a href={href.run(run.id)}>{run.name}</a>
                  </td>
                  <td>{run.kind}</td>
                  <td>
                    <PhaseBadge phase={run.phase} />
                  </td>
                  <td className="num">{run.attempt_count}</td>
                  <td className="num">{run.gpus}</td>
                  <td className="num">{orDash(run.latest_step)}</td>
                  <td className="num">
                    <BestEval summary={summaries.get(run.id)} />
                  </td>
                  <td className="num">{percent(summaries.get(run.id)?.goodput)}</td>
                  <td className="num" title={run.created_at}>
                    {age(run.created_at)}
                  </td>
                </tr>
              ))}
              {end < rows.length && (
                <tr className="spacer-row" style={{ height: (rows.length - end) * ROW_HEIGHT }} aria-hidden="true" />
              )}
            </tbody>
          </table>
          {isFetchingNextPage && <Loading what="more runs" />}
        </div>
      )}
    </>
  );
}

function BestEval({ summary }: { summary: Schemas['RunSummary'] | undefined }) {
  const best = summary?.best_eval;
  if (!best) return <>—</>;
  const how = best.ranked_by === 'spec' ? "the spec's checkpoints.best" : 'metric name';
  return (
    <a href={href.checkpoint(best.checkpoint_id)} title={`${best.suite} ${best.metric} (${best.mode}, by ${how}) at step ${best.step}`}>
      {score(best.value)} <span className="muted small">{best.metric}</span>
    </a>
  );
}

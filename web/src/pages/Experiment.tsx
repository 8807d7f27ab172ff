import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap } from '../api/client';
import { useExperiment, useProject } from '../api/queries';
import { PhaseBadge } from '../components/PhaseBadge';
import { Empty, ErrorBox, Loading } from '../components/states';
import { age, orDash } from '../format';
import { href } from '../router';

const PAGE_SIZE = 50;

export function Experiment({ id }: { id: number }) {
  // cursors[i] fetches page i; the API hands out the next one with each page.
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const page = cursors.length - 1;

  const experiment = useExperiment(id);
  const project = useProject(experiment.data?.project_id);
  const runs = useQuery({
    queryKey: ['runs', id, cursors[page]],
    placeholderData: keepPreviousData,
    refetchInterval: 10_000,
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/runs', {
          params: { query: { experiment_id: id, cursor: cursors[page], limit: PAGE_SIZE } },
        }),
      ),
  });

  if (experiment.isError) return <ErrorBox error={experiment.error} />;
  const nextCursor = runs.data?.next_cursor;
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
      {runs.isPending && <Loading what="runs" />}
      {runs.isError && <ErrorBox error={runs.error} />}
      {runs.data?.items.length === 0 && page === 0 && (
        <Empty>
          No runs in this experiment yet. Submit one with <code>crucible submit run.yaml</code>.
        </Empty>
      )}
      {runs.data && runs.data.items.length > 0 && (
        <table className="runs" aria-label="Runs">
          <thead>
            <tr>
              <th>Name</th>
              <th>Kind</th>
              <th>Phase</th>
              <th className="num">Attempt</th>
              <th className="num">GPUs</th>
              <th className="num">Latest step</th>
              <th className="num">Age</th>
            </tr>
          </thead>
          <tbody>
            {runs.data.items.map((run) => (
              <tr key={run.id}>
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
                <td className="num" title={run.created_at}>
                  {age(run.created_at)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <div className="pager">
        <button
          type="button"
          disabled={page === 0}
          onClick={() => setCursors((stack) => stack.slice(0, -1))}
        >
          ← Newer
        </button>
        <span className="muted">Page {page + 1}</span>
        <button
          type="button"
          disabled={!nextCursor || runs.isPlaceholderData}
          onClick={() => nextCursor && setCursors((stack) => [...stack, nextCursor])}
        >
          Older →
        </button>
      </div>
    </>
  );
}

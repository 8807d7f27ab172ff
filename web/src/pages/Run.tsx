import { useQuery } from '@tanstack/react-query';

import { api, unwrap, type Run as RunT } from '../api/client';
import { useExperiment, useProject } from '../api/queries';
import { MetricChart } from '../components/MetricChart';
import { PhaseBadge } from '../components/PhaseBadge';
import { Empty, ErrorBox, Loading } from '../components/states';
import { dateTime, orDash } from '../format';
import { href } from '../router';

const TERMINAL: RunT['phase'][] = ['Succeeded', 'Failed', 'Cancelled'];
const MAX_POINTS = 2000;

export function Run({ id }: { id: number }) {
  const run = useQuery({
    queryKey: ['run', id],
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id: id } } })),
    // A finished run no longer changes; a live one is polled.
    refetchInterval: (query) =>
      query.state.data && TERMINAL.includes(query.state.data.phase) ? false : 5_000,
  });
  const experimentId = run.data?.experiment_id;
  const experiment = useExperiment(experimentId);
  const projectId = run.data?.project_id;
  const project = useProject(projectId);
  const live = run.data !== undefined && !TERMINAL.includes(run.data.phase);
  const path = { run_id: id };
  const attempts = useQuery({
    queryKey: ['attempts', id],
    refetchInterval: live ? 5_000 : false,
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}/attempts', { params: { path } })),
  });
  const events = useQuery({
    queryKey: ['events', id],
    refetchInterval: live ? 5_000 : false,
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/runs/{run_id}/events', { params: { path, query: { limit: 500 } } })),
  });
  const metrics = useQuery({
    queryKey: ['metrics', id, MAX_POINTS],
    refetchInterval: live ? 10_000 : false,
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/runs/{run_id}/metrics', {
          params: { path, query: { max_points: MAX_POINTS } },
        }),
      ),
  });

  if (run.isPending) return <Loading what="the run" />;
  if (run.isError) return <ErrorBox error={run.error} />;
  const r = run.data;
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / <a href={href.project(r.project_id)}>{project.data?.name ?? 'project'}</a> /{' '}
        <a href={href.experiment(r.experiment_id)}>{experiment.data?.name ?? 'experiment'}</a> / {r.name}
      </nav>
      <h1>
        {r.name} <PhaseBadge phase={r.phase} />
      </h1>
      <dl className="facts">
        <dt>Kind</dt>
        <dd>{r.kind}</dd>
        <dt>Backend</dt>
        <dd>{r.backend}</dd>
        <dt>GPUs</dt>
        <dd>{r.gpus}</dd>
        <dt>Latest step</dt>
        <dd>{orDash(r.latest_step)}</dd>
        <dt>Attempts</dt>
        <dd>{r.attempt_count}</dd>
        <dt>Created</dt>
        <dd>{dateTime(r.created_at)}</dd>
        {r.reason && (
          <>
            <dt>Reason</dt>
            <dd>
              {r.reason}
              {r.message && `: ${r.message}`}
            </dd>
          </>
        )}
      </dl>

      <section>
        <h2>Metrics</h2>
        {metrics.isPending && <Loading what="metrics" />}
        {metrics.isError && <ErrorBox error={metrics.error} />}
        {metrics.data?.series.length === 0 && (
          <Empty>No metrics logged yet; they appear here as the workload reports them.</Empty>
        )}
        <div className="charts">
          {metrics.data?.series.map((series) => <MetricChart key={series.key} series={series} />)}
        </div>
      </section>

      <section>
        <h2>Attempts</h2>
        {attempts.isPending && <Loading what="attempts" />}
        {attempts.isError && <ErrorBox error={attempts.error} />}
        {attempts.data?.length === 0 && <Empty>No attempt has started yet.</Empty>}
        {attempts.data && attempts.data.length > 0 && (
          <table aria-label="Attempts">
            <thead>
              <tr>
                <th className="num">#</th>
                <th>Started because</th>
                <th>Started</th>
                <th>Ended</th>
                <th>Ended because</th>
                <th className="num">Exit code</th>
              </tr>
            </thead>
            <tbody>
              {attempts.data.map((attempt) => (
                <tr key={attempt.id}>
                  <td className="num">{attempt.number}</td>
                  <td>{attempt.start_reason}</td>
                  <td>{dateTime(attempt.started_at ?? attempt.created_at)}</td>
                  <td>{dateTime(attempt.ended_at)}</td>
                  <td title={attempt.message}>{orDash(attempt.end_reason)}</td>
                  <td className="num">{orDash(attempt.exit_code)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      <section>
        <h2>Events</h2>
        {events.isPending && <Loading what="events" />}
        {events.isError && <ErrorBox error={events.error} />}
        {events.data?.length === 0 && <Empty>No events yet.</Empty>}
        {events.data && events.data.length > 0 && (
          <ol className="timeline" aria-label="Events">
            {events.data.map((event) => (
              <li key={event.id}>
                <time dateTime={event.created_at}>{dateTime(event.created_at)}</time>
                <strong>{event.type}</strong>
                {typeof event.data.phase === 'string' && <span>→ {event.data.phase}</span>}
                {event.reason && <span className="reason">{event.reason}</span>}
                {event.message && <span className="muted">{event.message}</span>}
              </li>
            ))}
          </ol>
        )}
      </section>
    </>
  );
}

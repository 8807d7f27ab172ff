import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap, type Phase } from '../api/client';
import { useExperiment, useMetricKeys, useProject } from '../api/queries';
import { useRunEvents } from '../api/useRunEvents';
import { AttemptTimeline } from '../components/AttemptTimeline';
import { CheckpointsTable } from '../components/CheckpointsTable';
import { CodeProvenance } from '../components/CodeProvenance';
import { GoodputSummary } from '../components/GoodputSummary';
import { LogTail } from '../components/LogTail';
import { MetricChart } from '../components/MetricChart';
import { NumericsPanel } from '../components/NumericsPanel';
import { PhaseBadge } from '../components/PhaseBadge';
import { RlHealth } from '../components/RlHealth';
import { RunActions } from '../components/RunActions';
import { RunPods } from '../components/RunPods';
import { RunProfiles } from '../components/RunProfiles';
import { Empty, ErrorBox, Loading } from '../components/states';
import { StepRangeForm } from '../components/StepRangeForm';
import { dateTime, orDash } from '../format';
import { isNumericsKey } from '../lib/numerics';
import { toYaml } from '../lib/yaml';
import type { StepWindow } from '../lib/zoom';
import { href } from '../router';

export const TERMINAL: Phase[] = ['Succeeded', 'Failed', 'Cancelled'];
// Points per series the server cuts each chart to; a zoom asks again for the same number
// over fewer steps, so the detail grows as the window shrinks.
const MAX_POINTS = 2000;

export function Run({ id }: { id: number }) {
  const path = { run_id: id };
  const run = useQuery({
    queryKey: ['run', id],
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}', { params: { path } })),
    // A finished run no longer changes; a live one is polled for its latest step.
    refetchInterval: (query) =>
      query.state.data && TERMINAL.includes(query.state.data.phase) ? false : 5_000,
  });
  const experiment = useExperiment(run.data?.experiment_id);
  const project = useProject(run.data?.project_id);
  const live = run.data !== undefined && !TERMINAL.includes(run.data.phase);
  const [zoom, setZoom] = useState<StepWindow | null>(null);

  const metricKeys = useMetricKeys(id, live);
  // A low-precision run logs a dozen numerics series per layer (several hundred for a 124M
  // GPT): the Numerics section sums them up, so the charts ask only for the other keys rather
  // than download them all at full chart detail. Without such keys (or without the list) the
  // charts ask for everything, as the list cannot be out of date then.
  const keys = metricKeys.data?.keys.map((k) => k.key);
  const chartKeys = keys?.some(isNumericsKey) ? keys.filter((key) => !isNumericsKey(key)) : undefined;
  const metrics = useQuery({
    queryKey: ['metrics', id, MAX_POINTS, zoom?.stepMin, zoom?.stepMax, chartKeys],
    enabled: !metricKeys.isPending,
    refetchInterval: live ? 10_000 : false,
    // The old curve stays up while the zoomed one loads, instead of a flash of "Loading".
    placeholderData: keepPreviousData,
    queryFn: async () =>
      chartKeys?.length === 0
        ? { run_id: id, series: [] }
        : unwrap(
            await api.GET('/api/v1/runs/{run_id}/metrics', {
              params: {
                path,
                query: {
                  keys: chartKeys?.join(','),
                  max_points: MAX_POINTS,
                  step_min: zoom?.stepMin,
                  step_max: zoom?.stepMax,
                },
              },
            }),
          ),
    // A key the list did not have yet (a live run that just started logging numerics) is
    // still left to the Numerics section.
    select: (history) => ({ ...history, series: history.series.filter((series) => !isNumericsKey(series.key)) }),
  });
  // The lists below are cheap, but on a busy single-process server they would slow the
  // metrics query down; the charts are what the page is opened for, so they go first.
  const chartsAsked = !metrics.isPending;
  const { events, stream } = useRunEvents(id, live, chartsAsked);

  const attempts = useQuery({
    queryKey: ['attempts', id],
    enabled: chartsAsked,
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}/attempts', { params: { path } })),
  });
  const goodput = useQuery({
    queryKey: ['goodput', id],
    enabled: chartsAsked,
    refetchInterval: live ? 15_000 : false,
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}/goodput', { params: { path } })),
  });
  const checkpoints = useQuery({
    queryKey: ['checkpoints', id],
    enabled: chartsAsked,
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/runs/{run_id}/checkpoints', { params: { path, query: { limit: 500 } } })),
  });
  const evals = useQuery({
    queryKey: ['evals', id],
    enabled: chartsAsked,
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}/evals', { params: { path } })),
  });
  if (run.isPending) return <Loading what="the run" />;
  if (run.isError) return <ErrorBox error={run.error} retry={() => void run.refetch()} />;
  const r = run.data;
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / <a href={href.project(r.project_id)}>{project.data?.name ?? 'project'}</a> /{' '}
        <a href={href.experiment(r.experiment_id)}>{experiment.data?.name ?? 'experiment'}</a> / {r.name}
      </nav>
      <h1>
        {r.name} <PhaseBadge phase={r.phase} />
        {live && (
          <span className={`live live-${stream}`} role="status">
            {stream === 'live' ? 'live' : stream === 'reconnecting' ? 'reconnecting…' : 'connecting…'}
          </span>
        )}
      </h1>
      {live && <RunActions run={r} />}
      <nav className="toolbar" aria-label="Run again">
        <a className="button" href={href.submit(r.project_id, { from: 'resubmit', runId: r.id })}>
          Resubmit
        </a>
        <a className="button" href={href.submit(r.project_id, { from: 'reproduce', runId: r.id })}>
          Reproduce
        </a>
      </nav>
      <dl className="facts">
        <dt>Kind</dt>
        <dd>{r.kind}</dd>
        <dt>Backend</dt>
        <dd>{r.backend}</dd>
        <dt>GPUs</dt>
        <dd>{r.gpus}</dd>
        {r.k8s_name && (
          <>
            <dt>Kubernetes</dt>
            <dd>
              <code>
                {r.k8s_namespace}/{r.k8s_name}
              </code>{' '}
              <span className="muted">pods: kubectl get pods -n {r.k8s_namespace} -l crucible.dev/run={r.k8s_name}</span>
            </dd>
          </>
        )}
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
        <dt>Lineage</dt>
        <dd>
          <a href={href.lineage('run', r.id)}>Explore the graph around this run</a>
        </dd>
      </dl>

      <section>
        <h2>Metrics</h2>
        <div className="toolbar">
          <span className="muted">
            {zoom
              ? `Steps ${zoom.stepMin.toLocaleString()}–${zoom.stepMax.toLocaleString()}`
              : 'All steps. Drag across a chart to zoom in; the server sends that range at full detail.'}
          </span>
          {zoom && (
            <button type="button" onClick={() => setZoom(null)}>
              Show all steps
            </button>
          )}
          {metrics.isFetching && metrics.isPlaceholderData && <span className="muted">Loading the zoomed range…</span>}
          <span className="spacer" />
          <StepRangeForm onZoom={setZoom} />
        </div>
        {metrics.isPending && <Loading what="metrics" />}
        {metrics.isError && <ErrorBox error={metrics.error} retry={() => void metrics.refetch()} />}
        {metrics.data?.series.length === 0 && (
          <Empty>
            {zoom
              ? 'No points in this step range. Show all steps to go back.'
              : 'No metrics logged yet; they appear here as the workload reports them (run.log in the SDK).'}
          </Empty>
        )}
        {chartsAsked && <RlHealth runId={id} live={live} />}
        <div className="charts">
          {metrics.data?.series.map((series) => <MetricChart key={series.key} series={series} onZoom={setZoom} />)}
        </div>
      </section>

      {chartsAsked && metricKeys.data && <NumericsPanel runId={id} keys={metricKeys.data.keys} live={live} />}

      <section>
        <h2>Attempts</h2>
        {attempts.isPending && <Loading what="attempts" />}
        {attempts.isError && <ErrorBox error={attempts.error} retry={() => void attempts.refetch()} />}
        {attempts.data?.length === 0 && (
          <Empty>No attempt has started yet; the run is {r.phase}{r.message ? `: ${r.message}` : '.'}</Empty>
        )}
        {attempts.data && attempts.data.length > 0 && <AttemptTimeline attempts={attempts.data} goodput={goodput.data} />}
      </section>

      <section>
        <h2>Pods and GPUs</h2>
        {chartsAsked && <RunPods run={r} live={live} />}
      </section>

      <section>
        <h2>Goodput</h2>
        {goodput.isPending && <Loading what="goodput" />}
        {goodput.isError && <ErrorBox error={goodput.error} retry={() => void goodput.refetch()} />}
        {goodput.data && goodput.data.goodput === null && <Empty>Goodput is measured once an attempt has run.</Empty>}
        {goodput.data && goodput.data.goodput !== null && <GoodputSummary goodput={goodput.data} />}
      </section>

      {chartsAsked && <RunProfiles run={r} live={live} />}

      <section>
        <h2>Checkpoints</h2>
        {(checkpoints.isPending || evals.isPending) && <Loading what="checkpoints" />}
        {checkpoints.isError && <ErrorBox error={checkpoints.error} retry={() => void checkpoints.refetch()} />}
        {evals.isError && <ErrorBox error={evals.error} retry={() => void evals.refetch()} />}
        {checkpoints.data?.items.length === 0 && (
          <Empty>No checkpoints yet. A workload saves them with the SDK&apos;s run.checkpoint(); each one is evaluated as it lands.</Empty>
        )}
        {checkpoints.data && checkpoints.data.items.length > 0 && evals.data && (
          <CheckpointsTable checkpoints={checkpoints.data.items} evals={evals.data} />
        )}
      </section>

      <section>
        <h2>Events</h2>
        {events.isPending && <Loading what="events" />}
        {events.isError && <ErrorBox error={events.error} retry={() => void events.refetch()} />}
        {events.data?.length === 0 && <Empty>No events yet.</Empty>}
        {events.data && events.data.length > 0 && (
          <ol className="timeline" aria-label="Events" aria-live="polite">
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

      <section>
        <h2>Log</h2>
        {attempts.data && <LogTail runId={id} attempts={attempts.data} live={live} />}
      </section>

      <section>
        <h2>Spec</h2>
        <dl className="facts">
          <dt>Spec digest</dt>
          <dd>
            <code>{r.spec_digest}</code>
          </dd>
        </dl>
        <h3>Code</h3>
        <CodeProvenance run={r} attempts={attempts.data ?? []} />
        <pre className="yaml" aria-label="Spec as YAML" tabIndex={0}>
          {toYaml(r.manifest)}
        </pre>
      </section>
    </>
  );
}

import { useQuery } from '@tanstack/react-query';

import { api, unwrap } from '../api/client';
import { useProject } from '../api/queries';
import { ParallelCoordinates } from '../components/ParallelCoordinates';
import { ParamScatter, STATUSES } from '../components/ParamScatter';
import { PhaseBadge } from '../components/PhaseBadge';
import { Empty, ErrorBox, Loading } from '../components/states';
import { SweepActions } from '../components/SweepActions';
import { SweepTrialsTable } from '../components/SweepTrialsTable';
import { age } from '../format';
import {
  bestTrial,
  metricAxis,
  parameterAxis,
  parameterPaths,
  parameterSpecs,
  STATUS_LABEL,
} from '../lib/sweeps';
import { href } from '../router';

// A running sweep changes as its trials log and the workers' controller looks (every few
// seconds); an ended one does not.
const LIVE_REFRESH_MS = 5_000;

/** A sweep: how far its budget has gone, its trials, and the metric against each parameter. */
export function Sweep({ id }: { id: number }) {
  const sweep = useQuery({
    queryKey: ['sweep', id],
    refetchInterval: (query) => (query.state.data?.phase === 'Running' ? LIVE_REFRESH_MS : false),
    queryFn: async () => unwrap(await api.GET('/api/v1/sweeps/{sweep_id}', { params: { path: { sweep_id: id } } })),
  });
  const project = useProject(sweep.data?.project_id);

  if (sweep.isError) return <ErrorBox error={sweep.error} retry={() => void sweep.refetch()} />;
  if (!sweep.data) return <Loading what="the sweep" />;
  const data = sweep.data;
  const paths = parameterPaths(data);
  const specs = parameterSpecs(data.manifest);
  const best = bestTrial(data);
  const values = metricAxis(data.trials);
  const runIds = data.trials.map((trial) => trial.run_id);
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> /{' '}
        <a href={href.project(data.project_id)}>{project.data?.name ?? 'project'}</a> / sweep {data.name}
      </nav>
      <h1>
        {data.name} <PhaseBadge phase={data.phase} />
      </h1>
      <dl className="facts" aria-label="Sweep">
        <dt>Metric</dt>
        <dd>
          <code>{data.metric}</code>, {data.goal === 'maximize' ? 'maximized' : 'minimized'}
        </dd>
        <dt>Trials</dt>
        <dd>
          <progress max={data.budget} value={data.trials.length} aria-label="Trials started" />{' '}
          <span aria-label="Trials started of the budget">
            {data.trials.length} of {data.budget} started
          </span>
        </dd>
        {data.message && (
          <>
            <dt>Message</dt>
            <dd aria-label="Sweep message">{data.message}</dd>
          </>
        )}
        <dt>Created</dt>
        <dd>
          {age(data.created_at)} ago{data.finished_at && `, ended ${age(data.finished_at)} ago`}
        </dd>
      </dl>
      <div className="toolbar">
        {runIds.length > 0 && <a href={href.compare(runIds)}>Compare all {runIds.length} trials</a>}
      </div>
      <SweepActions sweep={data} />

      <section aria-labelledby="trials-heading">
        <h2 id="trials-heading">Trials</h2>
        {data.trials.length === 0 ? (
          <Empty>No trial has started yet; the workers start the first within seconds of the submission.</Empty>
        ) : (
          <SweepTrialsTable sweep={data} paths={paths} best={best} />
        )}
      </section>

      {data.trials.length > 0 && (
        <>
          <section aria-labelledby="scatter-heading">
            <h2 id="scatter-heading">
              {data.metric} against each parameter
            </h2>
            <ul className="legend" aria-label="Point colours">
              {STATUSES.map((status) => (
                <li key={status}>
                  <span className={`swatch status-${status}`} aria-hidden="true" />
                  {STATUS_LABEL[status]}
                </li>
              ))}
              <li>
                <span className="swatch status-best" aria-hidden="true" />
                best (ringed)
              </li>
            </ul>
            <div className="charts scatters">
              {paths.map((path) => (
                <ParamScatter
                  key={path}
                  path={path}
                  metric={data.metric}
                  x={parameterAxis(
                    data.trials.map((trial) => trial.point[path]),
                    specs[path],
                  )}
                  y={values}
                  trials={data.trials}
                  best={best?.number ?? null}
                />
              ))}
            </div>
          </section>
          <section aria-labelledby="parallel-heading">
            <h2 id="parallel-heading">Parallel coordinates</h2>
            <p className="muted small">
              One line per trial, coloured by its {data.metric}: yellow-green the best seen, purple the worst, grey none logged yet. The best trial is outlined and on top.
            </p>
            <ParallelCoordinates sweep={data} />
          </section>
        </>
      )}
    </>
  );
}

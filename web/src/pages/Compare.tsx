import { keepPreviousData, useQueries } from '@tanstack/react-query';
import { useMemo, useState } from 'react';

import { api, unwrap, type MetricSeries, type Run } from '../api/client';
import { useExperiment } from '../api/queries';
import { LineChart, seriesColor } from '../components/LineChart';
import { PhaseBadge } from '../components/PhaseBadge';
import { Empty, ErrorBox, Loading } from '../components/states';
import { alignSeries, configDiff, metricKeys } from '../lib/compare';
import type { StepWindow } from '../lib/zoom';
import { href } from '../router';

// Fewer points per run than the run page: several curves share each chart.
const MAX_POINTS = 1000;

/** What a run was asked to do, for the diff: its spec, tags and code. */
function settings(run: Run): unknown {
  return { spec: run.manifest.spec, tags: run.tags, code: run.code_ref };
}

export function Compare({ runIds }: { runIds: number[] }) {
  const [zoom, setZoom] = useState<StepWindow | null>(null);
  const [onlyDifferences, setOnlyDifferences] = useState(true);
  const runs = useQueries({
    queries: runIds.map((run_id) => ({
      queryKey: ['run', run_id],
      queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id } } })),
    })),
  });
  const metrics = useQueries({
    queries: runIds.map((run_id) => ({
      queryKey: ['metrics', run_id, MAX_POINTS, zoom?.stepMin, zoom?.stepMax],
      placeholderData: keepPreviousData,
      queryFn: async () =>
        unwrap(
          await api.GET('/api/v1/runs/{run_id}/metrics', {
            params: {
              path: { run_id },
              query: { max_points: MAX_POINTS, step_min: zoom?.stepMin, step_max: zoom?.stepMax },
            },
          }),
        ),
    })),
  });

  const experiment = useExperiment(runs[0]?.data?.experiment_id);
  const seriesLists = metrics.map((m) => m.data?.series);
  const keys = metricKeys(seriesLists);
  const loaded = runs.every((r) => r.isSuccess);
  const names = runs.map((r, i) => r.data?.name ?? `run ${runIds[i]}`);
  // A few hundred rows at most; recomputed each render rather than memoised on a new array.
  const diff = loaded ? configDiff(runs.map((r) => (r.data ? settings(r.data) : {}))) : [];
  const shown = onlyDifferences ? diff.filter((row) => row.differs) : diff;
  const failed = runs.find((r) => r.isError) ?? metrics.find((m) => m.isError);

  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> /{' '}
        {experiment.data ? <a href={href.experiment(experiment.data.id)}>{experiment.data.name}</a> : '…'} / compare
      </nav>
      <h1>Compare {runIds.length} runs</h1>
      {failed?.error && <ErrorBox error={failed.error} />}
      <ul className="legend" aria-label="Compared runs">
        {runs.map((r, i) => (
          <li key={runIds[i]}>
            <span className="swatch" style={{ background: seriesColor(i) }} aria-hidden="true" />
            <a href={href.run(runIds[i] ?? 0)}>{names[i]}</a> {r.data && <PhaseBadge phase={r.data.phase} />}
          </li>
        ))}
      </ul>

      <section>
        <h2>Metrics</h2>
        <div className="toolbar">
          <span className="muted">
            {zoom ? `Steps ${zoom.stepMin.toLocaleString()}–${zoom.stepMax.toLocaleString()}` : 'All steps. Drag across a chart to zoom in.'}
          </span>
          {zoom && (
            <button type="button" onClick={() => setZoom(null)}>
              Show all steps
            </button>
          )}
        </div>
        {metrics.some((m) => m.isPending) && <Loading what="metrics" />}
        {metrics.every((m) => m.isSuccess) && keys.length === 0 && (
          <Empty>None of these runs has logged a metric yet, so there is no curve to overlay.</Empty>
        )}
        <div className="charts">
          {keys.map((key) => (
            <CompareChart
              key={key}
              metric={key}
              series={seriesLists.map((list) => list?.find((s) => s.key === key))}
              names={names}
              onZoom={setZoom}
            />
          ))}
        </div>
      </section>

      <section>
        <h2>Config</h2>
        <label className="toolbar">
          <input type="checkbox" checked={onlyDifferences} onChange={(event) => setOnlyDifferences(event.target.checked)} />
          Only settings that differ
        </label>
        {!loaded && <Loading what="the runs' settings" />}
        {loaded && shown.length === 0 && (
          <Empty>
            {onlyDifferences ? 'These runs were submitted with the same settings. Untick the box to see them.' : 'No settings.'}
          </Empty>
        )}
        {shown.length > 0 && (
          <div className="scroll-x">
            <table aria-label="Config diff" className="diff">
              <thead>
                <tr>
                  <th>Setting</th>
                  {names.map((name, i) => (
                    <th key={runIds[i]}>{name}</th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {shown.map((row) => (
                  <tr key={row.path} className={row.differs ? 'differs' : undefined}>
                    <td>
                      <code>{row.path}</code>
                    </td>
                    {row.values.map((value, i) => (
                      <td key={runIds[i]}>{value === undefined ? <span className="muted">unset</span> : value}</td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </>
  );
}

function CompareChart({
  metric,
  series,
  names,
  onZoom,
}: {
  metric: string;
  series: (MetricSeries | undefined)[];
  names: string[];
  onZoom: (window: StepWindow) => void;
}) {
  const data = useMemo(() => alignSeries(series), [series]);
  const labels = useMemo(() => names, [names]);
  return (
    <figure className="chart">
      <figcaption>
        <strong>{metric}</strong>{' '}
        <span className="muted">
          {series.filter(Boolean).length} of {names.length} runs
        </span>
      </figcaption>
      <LineChart data={data} labels={labels} testId={`compare-${metric}`} onZoom={onZoom} />
    </figure>
  );
}

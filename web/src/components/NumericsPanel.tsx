import { useQuery } from '@tanstack/react-query';
import { useMemo, type CSSProperties } from 'react';
import type uPlot from 'uplot';

import { api, unwrap, type MetricSeries } from '../api/client';
import { score } from '../format';
import {
  DRIFT_LINES,
  MATMUL_ERROR,
  MATMUL_ERROR_MAX_KEY,
  SATURATION_WARNING,
  alignOnSteps,
  amaxDrift,
  chunkKeys,
  columns,
  emulatedTable,
  fp8Table,
  parseNumericsKey,
  saturationWarnings,
  scaleDrift,
  shade,
  sharePercent,
  stepUnion,
  tableMax,
  warningLines,
  worstError,
  worstSeries,
  type EmulatedStat,
  type Fp8Stat,
  type LatestPoint,
  type NumericsTable,
  type ShareStat,
} from '../lib/numerics';
import { LineChart } from './LineChart';
import { ErrorBox, Loading } from './states';

// Points per series: the worst-share charts reduce several hundred series to one line, and
// the server keeps each bucket's highest point, so the peaks survive the cut.
const HISTORY_POINTS = 500;
// Characters of `keys=` per request; chunkKeys says why the keys are split at all.
const KEYS_PER_REQUEST = 6_000;
// The loss the shares are read against; a run that logs it under another name shows no loss chart.
const LOSS_KEY = 'loss';
// The strongest tint a cell gets, in percent of its colour: past it, text stops being legible
// in one of the two themes.
const STRONGEST_TINT = 45;

/** A low-precision run's per-layer numerics, summarised: the worst layer over steps beside the
 * loss, and every layer's latest values in a table. Renders nothing for a run without them. */
export function NumericsPanel({ runId, keys, live }: { runId: number; keys: LatestPoint[]; live: boolean }) {
  const emulated = useMemo(() => emulatedTable(keys), [keys]);
  const fp8 = useMemo(() => fp8Table(keys), [keys]);
  const hasLoss = keys.some(({ key }) => key === LOSS_KEY);
  const hasError = keys.some(({ key }) => key === MATMUL_ERROR_MAX_KEY);
  if (!emulated && !fp8) return null;
  return (
    <section className="numerics" aria-labelledby="numerics-heading">
      <h2 id="numerics-heading">Numerics</h2>
      {emulated && (
        <EmulatedNumerics
          runId={runId}
          table={emulated}
          keys={keys}
          hasLoss={hasLoss}
          hasError={hasError}
          live={live}
        />
      )}
      {fp8 && (
        <Fp8Numerics runId={runId} table={fp8} keys={keys} hasLoss={hasLoss} hasError={hasError} live={live} />
      )}
    </section>
  );
}

/** The history of `keys` at HISTORY_POINTS a series, in as many requests as the URL needs. */
function useHistory<T>(runId: number, keys: string[], live: boolean, select: (series: MetricSeries[]) => T) {
  return useQuery({
    queryKey: ['numerics-history', runId, keys],
    refetchInterval: live ? 30_000 : false,
    queryFn: async () => {
      const answers = await Promise.all(
        chunkKeys(keys, KEYS_PER_REQUEST).map(async (chunk) =>
          unwrap(
            await api.GET('/api/v1/runs/{run_id}/metrics', {
              params: { path: { run_id: runId }, query: { keys: chunk.join(','), max_points: HISTORY_POINTS } },
            }),
          ),
        ),
      );
      return answers.flatMap((answer) => answer.series);
    },
    select,
  });
}

function keysOf(keys: LatestPoint[], wanted: (key: string) => boolean): string[] {
  return keys.map(({ key }) => key).filter(wanted);
}

function tint(color: string, level: number): CSSProperties | undefined {
  if (level === 0) return undefined;
  return { background: `color-mix(in srgb, var(${color}) ${Math.round(level * STRONGEST_TINT)}%, transparent)` };
}

/** Whether a per-layer key is one the charts draw: the per-layer GEMM errors are read from the
 * latest values alone, the run-level worst standing in for them over steps. */
function chartedStat(key: string, family: 'emulated' | 'fp8'): boolean {
  const parsed = parseNumericsKey(key);
  return parsed?.family === family && parsed.stat !== MATMUL_ERROR;
}

// Outside the components, so that react-query reuses the result until new data arrives and
// the charts are not rebuilt on every render.
function worstBesideLoss(series: MetricSeries[]) {
  const saturated = worstSeries(series, 'saturated', HISTORY_POINTS);
  const underflow = worstSeries(series, 'underflow', HISTORY_POINTS);
  const loss = series.find((one) => one.key === LOSS_KEY);
  const error = series.find((one) => one.key === MATMUL_ERROR_MAX_KEY);
  // One step axis for all four, so that a jump in the loss lines up with the share beside it.
  const steps = stepUnion([saturated, underflow, ...(loss ? [loss] : []), ...(error ? [error] : [])]);
  const drifts = amaxDrift(series, DRIFT_LINES);
  return {
    saturated: { worst: saturated, data: alignOnSteps([saturated], steps) },
    underflow: { worst: underflow, data: alignOnSteps([underflow], steps) },
    error: error ? alignOnSteps([error], steps) : null,
    loss: loss ? alignOnSteps([loss], steps) : null,
    amax: {
      drifts,
      data: alignOnSteps(drifts),
      labels: drifts.map(({ layer, operand }) => `${layer} ${operand}`),
    },
  };
}

function largestDrifts(series: MetricSeries[]) {
  const drifts = scaleDrift(series, DRIFT_LINES);
  const error = series.find((one) => one.key === MATMUL_ERROR_MAX_KEY);
  const loss = series.find((one) => one.key === LOSS_KEY);
  // The loss on the GEMM error's step axis, so that the two line up as the emulated panel's do.
  const steps = stepUnion([...(error ? [error] : []), ...(loss ? [loss] : [])]);
  return {
    drifts,
    data: alignOnSteps(drifts),
    labels: drifts.map((one) => one.layer),
    error: error ? alignOnSteps([error], steps) : null,
    loss: loss && error ? alignOnSteps([loss], steps) : null,
  };
}

function EmulatedNumerics({
  runId,
  table,
  keys,
  hasLoss,
  hasError,
  live,
}: {
  runId: number;
  table: NumericsTable<EmulatedStat>;
  keys: LatestPoint[];
  hasLoss: boolean;
  hasError: boolean;
  live: boolean;
}) {
  const warnings = saturationWarnings(table);
  const wanted = useMemo(
    () =>
      keysOf(
        keys,
        (key) =>
          chartedStat(key, 'emulated') || (hasLoss && key === LOSS_KEY) || (hasError && key === MATMUL_ERROR_MAX_KEY),
      ),
    [keys, hasLoss, hasError],
  );
  const history = useHistory(runId, wanted, live, worstBesideLoss);
  return (
    <>
      {warnings.length > 0 && (
        <div className="numerics-warning" role="status">
          <strong>
            {warnings.length === 1 ? 'An operand saturates' : `${warnings.length} operands saturate`} past{' '}
            {sharePercent(SATURATION_WARNING)} at the latest step:
          </strong>
          <ul aria-label="Saturation warnings">
            {warningLines(warnings).map((line) => (
              <li key={line}>{line}</li>
            ))}
          </ul>
        </div>
      )}
      {history.isPending && <Loading what="the numerics history" />}
      {history.isError && <ErrorBox error={history.error} retry={() => void history.refetch()} />}
      {history.data && (
        <div className="charts">
          <WorstChart title="Worst saturated share" stat="saturated" {...history.data.saturated} />
          <WorstChart title="Worst underflow share" stat="underflow" {...history.data.underflow} />
          {history.data.error && <ErrorChart data={history.data.error} table={table} />}
          {history.data.loss && <LossChart data={history.data.loss} />}
          {history.data.amax.drifts.length > 0 && (
            <figure className="chart">
              <figcaption>
                <strong>Amax history</strong>{' '}
                <span className="muted">
                  each operand&apos;s largest magnitude over its first logged value, the{' '}
                  {history.data.amax.drifts.length} that moved farthest (above 1: its values grew)
                </span>
              </figcaption>
              <LineChart data={history.data.amax.data} labels={history.data.amax.labels} testId="numerics-amax" />
            </figure>
          )}
        </div>
      )}
      <h3 id="numerics-shares-heading">Latest shares by layer</h3>
      <p className="muted small">
        Saturated: the operand&apos;s values the format&apos;s largest clipped (they would have rounded past it). Underflow: its non-zero
        values that came back zero. At each layer&apos;s latest logged step, the worst saturation first; a
        share of {sharePercent(SATURATION_WARNING)} or more saturated is marked.
        {hasErrorColumn(table) && ` ${ERROR_EXPLAINED}`}
      </p>
      <ShareTable table={table} />
    </>
  );
}

const LOSS_LABELS = [LOSS_KEY];

/** The run's loss on the steps of the numerics charts beside it. */
function LossChart({ data }: { data: uPlot.AlignedData }) {
  return (
    <figure className="chart">
      <figcaption>
        <strong>{LOSS_KEY}</strong> <span className="muted">on the same steps</span>
      </figcaption>
      <LineChart data={data} labels={LOSS_LABELS} testId="numerics-loss" />
    </figure>
  );
}

const STAT_LABELS: Record<ShareStat, string[]> = { saturated: ['worst saturated'], underflow: ['worst underflow'] };
const ERROR_LABELS = ['worst GEMM error'];
const ERROR_TITLE = 'GEMM error vs bf16';
const ERROR_EXPLAINED =
  `${ERROR_TITLE}: ‖y − y_bf16‖ / ‖y_bf16‖, the layer's forward GEMM against a bf16 GEMM of the ` +
  'unquantized operands, at the latest step that sampled it.';
// Amber, apart from saturation's red and underflow's blue.
const ERROR_COLOUR = '--warn';

function hasErrorColumn<Stat extends string>(table: NumericsTable<Stat>): boolean {
  return table.rows.some((row) => row.error !== undefined);
}

/** The run's largest per-layer GEMM error over steps, the layer that holds it named from the
 * latest values (the run-level series does not say which it was). */
function ErrorChart<Stat extends string>({ data, table }: { data: uPlot.AlignedData; table: NumericsTable<Stat> }) {
  const worst = worstError(table);
  return (
    <figure className="chart">
      <figcaption>
        <strong>{ERROR_TITLE} (worst layer)</strong>{' '}
        <span className="muted">
          relative error of each layer&apos;s forward GEMM against bf16&apos;s on the same batch, the largest over
          the layers
          {worst && `; latest ${sharePercent(worst.error)} in ${worst.layer}`}
        </span>
      </figcaption>
      <LineChart data={data} labels={ERROR_LABELS} testId="numerics-matmul-error" />
    </figure>
  );
}

/** A layer's latest GEMM error, tinted against the table's largest. */
function ErrorCell({ layer, error, scaleMax }: { layer: string; error: number | undefined; scaleMax: number }) {
  return (
    <td
      className="num"
      style={tint(ERROR_COLOUR, shade(error, scaleMax))}
      title={`${layer} ${ERROR_TITLE}: ${sharePercent(error)}`}
    >
      {sharePercent(error)}
    </td>
  );
}

function WorstChart({
  title,
  stat,
  worst,
  data,
}: {
  title: string;
  stat: ShareStat;
  worst: { values: number[]; keys: string[] };
  data: uPlot.AlignedData;
}) {
  const parsed = parseNumericsKey(worst.keys.at(-1) ?? '');
  const last = parsed && 'operand' in parsed ? parsed : null;
  return (
    <figure className="chart">
      <figcaption>
        <strong>{title}</strong>{' '}
        <span className="muted">
          over every layer and operand
          {last && `; latest ${sharePercent(worst.values.at(-1))} in ${last.layer} ${last.operand}`}
        </span>
      </figcaption>
      <LineChart data={data} labels={STAT_LABELS[stat]} testId={`numerics-worst-${stat}`} />
    </figure>
  );
}

const SHARE_STATS: ShareStat[] = ['saturated', 'underflow'];
const SHARE_ABBREVIATIONS: Record<ShareStat, string> = { saturated: 'sat.', underflow: 'under.' };
// Saturation is tinted red and underflow blue, so that the two read apart at a glance.
const SHARE_COLOURS: Record<ShareStat, string> = { saturated: '--bad', underflow: '--series-0' };

function ShareTable({ table }: { table: NumericsTable<EmulatedStat> }) {
  const shown = columns<ShareStat>(table, SHARE_STATS);
  const withError = hasErrorColumn(table);
  const errorMax = Math.max(0, ...table.rows.map((row) => row.error ?? 0));
  // Saturation is tinted against the threshold at least, so that a table whose worst share
  // is harmless does not glow; underflow against the table's largest.
  const scale: Record<ShareStat, number> = {
    saturated: Math.max(SATURATION_WARNING, tableMax(table, 'saturated')),
    underflow: tableMax(table, 'underflow'),
  };
  return (
    <div className="scroll-x" tabIndex={0} role="region" aria-labelledby="numerics-shares-heading">
      <table className="numerics-table" aria-label="Saturated and underflow shares by layer">
        <OperandHeader operands={table.operands} shown={shown} labels={SHARE_ABBREVIATIONS} withError={withError} />
        <tbody>
          {table.rows.map(({ layer, cells, error }) => (
            <tr key={layer}>
              <th scope="row">{layer}</th>
              {shown.map(({ operand, stat }) => {
                const value = cells[operand]?.[stat];
                const over = stat === 'saturated' && value !== undefined && value >= SATURATION_WARNING;
                return (
                  <td
                    key={`${operand}/${stat}`}
                    className={over ? 'num over' : 'num'}
                    style={tint(SHARE_COLOURS[stat], shade(value, scale[stat]))}
                    title={`${layer} ${operand} ${stat}: ${sharePercent(value)}`}
                  >
                    {sharePercent(value)}
                  </td>
                );
              })}
              {withError && <ErrorCell layer={layer} error={error} scaleMax={errorMax} />}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function OperandHeader<Stat extends string>({
  operands,
  shown,
  labels,
  withError,
}: {
  operands: string[];
  shown: { operand: string; stat: Stat }[];
  labels: Record<Stat, string>;
  /** A last column of each layer's GEMM error, which belongs to no operand. */
  withError: boolean;
}) {
  return (
    <thead>
      <tr>
        <th rowSpan={2} scope="col">
          Layer
        </th>
        {operands.map((operand) => {
          const span = shown.filter((column) => column.operand === operand).length;
          return (
            span > 0 && (
              <th key={operand} colSpan={span} scope="colgroup" className="operand">
                {operand}
              </th>
            )
          );
        })}
        {withError && (
          <th rowSpan={2} scope="col" className="num operand">
            {ERROR_TITLE}
          </th>
        )}
      </tr>
      <tr>
        {shown.map(({ operand, stat }) => (
          <th key={`${operand}/${stat}`} scope="col" className="num">
            <abbr title={stat}>{labels[stat]}</abbr>
          </th>
        ))}
      </tr>
    </thead>
  );
}

const FP8_STATS: Fp8Stat[] = ['amax', 'scale'];
const FP8_LABELS: Record<Fp8Stat, string> = { amax: 'amax', scale: 'scale' };

function Fp8Numerics({
  runId,
  table,
  keys,
  hasLoss,
  hasError,
  live,
}: {
  runId: number;
  table: NumericsTable<Fp8Stat>;
  keys: LatestPoint[];
  hasLoss: boolean;
  hasError: boolean;
  live: boolean;
}) {
  const wanted = useMemo(
    () =>
      keysOf(keys, (key) => {
        const parsed = parseNumericsKey(key);
        const inputScale = parsed?.family === 'fp8' && parsed.stat === 'scale' && parsed.operand === 'input';
        // The loss only beside the GEMM error: a drift chart alone has nothing to line up.
        const loss = hasLoss && hasError && key === LOSS_KEY;
        return inputScale || loss || (hasError && key === MATMUL_ERROR_MAX_KEY);
      }),
    [keys, hasLoss, hasError],
  );
  const history = useHistory(runId, wanted, live, largestDrifts);
  const shown = columns(table, FP8_STATS);
  // A row- or block-scaled run keeps a scale per row or block and logs none per tensor.
  const hasScale = shown.some(({ stat }) => stat === 'scale');
  const stats = hasScale ? 'amax and scale' : 'amax';
  const withError = hasErrorColumn(table);
  const errorMax = Math.max(0, ...table.rows.map((row) => row.error ?? 0));
  const amaxScale = new Map(table.operands.map((operand) => [operand, tableMax(table, 'amax', operand)]));
  const drift = history.data && history.data.drifts.length > 0 ? history.data : null;
  return (
    <>
      {history.isPending && wanted.length > 0 && <Loading what="the fp8 history" />}
      {history.isError && <ErrorBox error={history.error} retry={() => void history.refetch()} />}
      {(drift || history.data?.error) && (
        <div className="charts">
          {history.data?.error && <ErrorChart data={history.data.error} table={table} />}
          {history.data?.loss && <LossChart data={history.data.loss} />}
          {drift && (
            <figure className="chart">
              <figcaption>
                <strong>Input scale drift</strong>{' '}
                <span className="muted">
                  each layer&apos;s input scale over its first logged value, the {drift.drifts.length} that moved
                  farthest (below 1: its inputs grew)
                </span>
              </figcaption>
              <LineChart data={drift.data} labels={drift.labels} testId="fp8-scale-drift" />
            </figure>
          )}
        </div>
      )}
      <h3 id="fp8-latest-heading">Latest fp8 {stats} by layer</h3>
      <p className="muted small">
        amax: the largest magnitude the operand held
        {hasScale
          ? '; scale: what it was multiplied by to fill the fp8 range.'
          : '. This run logs no per-tensor scale: it scales each row or block of an operand by its own amax.'}{' '}
        Each amax is tinted against its column&apos;s largest.
        {withError && ` ${ERROR_EXPLAINED}`}
      </p>
      <div className="scroll-x" tabIndex={0} role="region" aria-labelledby="fp8-latest-heading">
        <table className="numerics-table" aria-label={`fp8 ${stats} by layer`}>
          <OperandHeader operands={table.operands} shown={shown} labels={FP8_LABELS} withError={withError} />
          <tbody>
            {table.rows.map(({ layer, cells, error }) => (
              <tr key={layer}>
                <th scope="row">{layer}</th>
                {shown.map(({ operand, stat }) => {
                  const value = cells[operand]?.[stat];
                  const level = stat === 'amax' ? shade(value, amaxScale.get(operand) ?? 0) : 0;
                  return (
                    <td key={`${operand}/${stat}`} className="num" style={tint('--series-0', level)}>
                      {score(value)}
                    </td>
                  );
                })}
                {withError && <ErrorCell layer={layer} error={error} scaleMax={errorMax} />}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

import type { Schemas } from '../api/client';

// The sweep page's arithmetic: axes for parameters (linear, log or categorical) and for
// the metric, where each trial lands on them, which trial is best, and the trials' order.
// Positions are fractions of an axis (0 at its start, 1 at its end), so the scatters and
// the parallel coordinates share them and only multiply by their own sizes.

export type Sweep = Schemas['SweepPublic'];
export type SweepTrial = Schemas['SweepTrialPublic'];
export type Goal = 'minimize' | 'maximize';

/** How a parameter was declared: `{values: [...]}` or `{min, max, log}`. */
export interface ParameterSpec {
  values?: unknown[];
  min?: number;
  max?: number;
  log?: boolean;
}

export type Axis =
  | { kind: 'linear' | 'log'; min: number; max: number }
  | { kind: 'category'; values: string[] };

export interface Tick {
  at: number;
  label: string;
}

export type TrialStatus = 'running' | 'finished' | 'stopped' | 'failed';

/** Two decades or more between the ends read better on a log scale: a grid such as
 * 1e-2, 1e-3, 1e-4 is spaced evenly there and crowded into a corner on a linear one. */
const LOG_SPAN = 100;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The parameters as the manifest declares them, by config path, in its order. */
export function parameterSpecs(manifest: Record<string, unknown>): Record<string, ParameterSpec> {
  const spec = manifest.spec;
  const parameters = isRecord(spec) ? spec.parameters : undefined;
  if (!isRecord(parameters)) return {};
  const specs: Record<string, ParameterSpec> = {};
  for (const [path, given] of Object.entries(parameters)) {
    if (!isRecord(given)) continue;
    specs[path] = {
      values: Array.isArray(given.values) ? given.values : undefined,
      min: typeof given.min === 'number' ? given.min : undefined,
      max: typeof given.max === 'number' ? given.max : undefined,
      log: given.log === true,
    };
  }
  return specs;
}

/** Every parameter's path: the manifest's, then any a trial's point has that it lacks. */
export function parameterPaths(sweep: Sweep): string[] {
  const paths = Object.keys(parameterSpecs(sweep.manifest));
  for (const trial of sweep.trials) {
    for (const path of Object.keys(trial.point)) if (!paths.includes(path)) paths.push(path);
  }
  return paths;
}

/** `config.train.lr` as a column or axis title: `train.lr`. */
export function parameterLabel(path: string): string {
  return path.replace(/^config\./, '');
}

/** A value as a cell shows it: numbers to four significant digits. */
export function formatValue(value: unknown): string {
  if (value === null || value === undefined) return '—';
  if (typeof value === 'number') return Number.isFinite(value) ? Number(value.toPrecision(4)).toString() : String(value);
  if (typeof value === 'string') return value;
  return JSON.stringify(value);
}

function finite(values: unknown[]): number[] {
  return values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
}

/** An axis for numbers: the declared range widened to take every value seen, on a log
 * scale when declared so or when the values span two decades or more. */
export function numericAxis(values: number[], spec: ParameterSpec = {}): Axis {
  const ends = finite([...values, spec.min, spec.max, ...(spec.values ?? [])]);
  if (ends.length === 0) return { kind: 'linear', min: 0, max: 1 };
  const min = Math.min(...ends);
  const max = Math.max(...ends);
  const positive = min > 0;
  const log = positive && (spec.log === true || max / min >= LOG_SPAN);
  return { kind: log ? 'log' : 'linear', min, max };
}

/** The axis of one parameter: categorical when any of its values is not a number (a
 * choice of strings or booleans), in the declared order, else numeric. */
export function parameterAxis(values: unknown[], spec: ParameterSpec = {}): Axis {
  const declared = spec.values ?? [];
  const all = [...declared, ...values].filter((v) => v !== undefined && v !== null);
  if (all.some((v) => typeof v !== 'number')) {
    const labels: string[] = [];
    for (const value of all) {
      const label = formatValue(value);
      if (!labels.includes(label)) labels.push(label);
    }
    return { kind: 'category', values: labels };
  }
  return numericAxis(finite(values), spec);
}

/** Where `value` lies along `axis`, 0 to 1; null where it cannot be placed (missing, not a
 * number on a numeric axis, not positive on a log axis, not one of the categories). */
export function position(axis: Axis, value: unknown): number | null {
  if (value === null || value === undefined) return null;
  if (axis.kind === 'category') {
    const index = axis.values.indexOf(formatValue(value));
    if (index < 0) return null;
    return axis.values.length === 1 ? 0.5 : index / (axis.values.length - 1);
  }
  if (typeof value !== 'number' || !Number.isFinite(value)) return null;
  if (axis.max === axis.min) return value === axis.min ? 0.5 : null;
  if (axis.kind === 'log') {
    if (value <= 0) return null;
    return (Math.log10(value) - Math.log10(axis.min)) / (Math.log10(axis.max) - Math.log10(axis.min));
  }
  return (value - axis.min) / (axis.max - axis.min);
}

/** Labels along an axis: every category; the powers of ten inside a log axis (its ends
 * when fewer than two fit); the ends and middle of a linear one. */
export function ticks(axis: Axis): Tick[] {
  if (axis.kind === 'category') {
    return axis.values.map((label) => ({ at: position(axis, label) ?? 0.5, label }));
  }
  if (axis.min === axis.max) return [{ at: 0.5, label: formatValue(axis.min) }];
  if (axis.kind === 'log') {
    const powers: number[] = [];
    for (let e = Math.ceil(Math.log10(axis.min)); e <= Math.floor(Math.log10(axis.max)); e += 1) powers.push(10 ** e);
    const values = powers.length >= 2 ? powers : [axis.min, axis.max];
    return values.map((value) => ({ at: position(axis, value) ?? 0, label: formatValue(value) }));
  }
  return [axis.min, (axis.min + axis.max) / 2, axis.max].map((value) => ({
    at: position(axis, value) ?? 0,
    label: formatValue(value),
  }));
}

/** Where a trial stands: stopped by the sweep (ASHA), still going, ended well or not. */
export function trialStatus(trial: SweepTrial): TrialStatus {
  if (trial.stopped_reason) return 'stopped';
  if (trial.phase === 'Succeeded') return 'finished';
  if (trial.phase === 'Failed' || trial.phase === 'Cancelled') return 'failed';
  return 'running';
}

export const STATUS_LABEL: Record<TrialStatus, string> = {
  running: 'running',
  finished: 'finished',
  stopped: 'stopped by ASHA',
  failed: 'failed or cancelled',
};

function better(goal: Goal, a: number, b: number): boolean {
  return goal === 'maximize' ? a > b : a < b;
}

/** The best trial: the sweep's own choice once it has ended; while it runs, the leader
 * among trials that finished, as the sweep will choose (a stopped trial is no candidate:
 * its last value is of fewer steps). `final` says which. */
export function bestTrial(sweep: Sweep): { number: number; final: boolean } | null {
  if (sweep.best_trial !== null) return { number: sweep.best_trial, final: true };
  let best: SweepTrial | null = null;
  for (const trial of sweep.trials) {
    if (trialStatus(trial) !== 'finished' || trial.value === null || !Number.isFinite(trial.value)) continue;
    if (best === null || best.value === null || better(sweep.goal as Goal, trial.value, best.value)) best = trial;
  }
  return best === null ? null : { number: best.number, final: false };
}

/** The metric's axis, over every trial's value. */
export function metricAxis(trials: SweepTrial[]): Axis {
  return numericAxis(finite(trials.map((t) => t.value)));
}

/** How good a value is along the metric's axis, 0 (worst seen) to 1 (best seen). */
export function goodness(axis: Axis, goal: Goal, value: number | null): number | null {
  const at = position(axis, value);
  if (at === null) return null;
  return goal === 'maximize' ? at : 1 - at;
}

// A sequential scale readable to red-green colour blindness (viridis): dark purple for the
// worst trial, yellow-green for the best. It stops short of viridis' pale yellow, which
// vanishes on the light theme's white.
const RAMP: [number, number, number][] = [
  [68, 1, 84],
  [59, 82, 139],
  [33, 145, 140],
  [94, 201, 98],
  [170, 220, 50],
];

/** The colour of a trial by how good its value is (null: no value yet, grey). */
export function rampColor(good: number | null): string {
  if (good === null) return 'var(--muted)';
  const t = Math.min(1, Math.max(0, good)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(t));
  const from = RAMP[i] ?? [0, 0, 0];
  const to = RAMP[i + 1] ?? from;
  const mix = from.map((c, k) => Math.round(c + ((to[k] ?? c) - c) * (t - i)));
  return `rgb(${mix.join(', ')})`;
}

export type TrialSort = { key: 'number' | 'value'; descending: boolean };

/** The trials in the table's order; by value, trials without one come last either way. */
export function sortTrials(trials: SweepTrial[], sort: TrialSort): SweepTrial[] {
  const sign = sort.descending ? -1 : 1;
  return [...trials].sort((a, b) => {
    if (sort.key === 'value') {
      if (a.value === null || b.value === null) {
        if (a.value !== b.value) return a.value === null ? 1 : -1;
      } else if (a.value !== b.value) {
        return sign * (a.value - b.value);
      }
    } else if (a.number !== b.number) {
      return sign * (a.number - b.number);
    }
    return a.number - b.number;
  });
}

/** A click on a column's header: the other column starts at its natural order (the metric
 * best first), the same column turns around. */
export function toggleTrialSort(current: TrialSort, key: TrialSort['key'], goal: Goal): TrialSort {
  if (current.key === key) return { key, descending: !current.descending };
  return { key, descending: key === 'value' && goal === 'maximize' };
}

export interface Box {
  width: number;
  height: number;
  /** Room left around the plot for labels: top, right, bottom, left. */
  margin: [number, number, number, number];
}

export interface ScatterPoint {
  number: number;
  x: number;
  y: number;
  status: TrialStatus;
  best: boolean;
}

/** One parameter against the metric: a point per trial that has both, in pixels of `box`
 * (the metric up the y-axis); the best drawn last, so on top. */
export function scatterPoints(
  trials: SweepTrial[],
  path: string,
  x: Axis,
  y: Axis,
  box: Box,
  best: number | null,
): ScatterPoint[] {
  const [top, right, bottom, left] = box.margin;
  const points: ScatterPoint[] = [];
  for (const trial of trials) {
    const px = position(x, trial.point[path]);
    const py = position(y, trial.value);
    if (px === null || py === null) continue;
    points.push({
      number: trial.number,
      x: left + px * (box.width - left - right),
      y: box.height - bottom - py * (box.height - top - bottom),
      status: trialStatus(trial),
      best: trial.number === best,
    });
  }
  return points.sort((a, b) => Number(a.best) - Number(b.best));
}

export interface ParallelAxis {
  key: string;
  label: string;
  axis: Axis;
  x: number;
}

export interface ParallelLine {
  number: number;
  /** SVG path data: a move where the trial has no value on an axis, so no line is guessed. */
  d: string;
  good: number | null;
  best: boolean;
}

export interface ParallelLayout {
  axes: ParallelAxis[];
  lines: ParallelLine[];
  /** The y of an axis' start (its lowest value) and end, in pixels. */
  bottom: number;
  top: number;
}

/** One vertical axis per parameter and the metric last, evenly spaced; a line per trial
 * through its values. Lines go worst first, trials without a value under them all and the
 * best last, so the best is on top. */
export function parallelLayout(sweep: Sweep, box: Box): ParallelLayout {
  const [top, right, bottom, left] = box.margin;
  const specs = parameterSpecs(sweep.manifest);
  const valueAxis = metricAxis(sweep.trials);
  const columns: { key: string; label: string; axis: Axis; read: (t: SweepTrial) => unknown }[] = [
    ...parameterPaths(sweep).map((path) => ({
      key: path,
      label: parameterLabel(path),
      axis: parameterAxis(
        sweep.trials.map((t) => t.point[path]),
        specs[path],
      ),
      read: (t: SweepTrial) => t.point[path],
    })),
    { key: sweep.metric, label: sweep.metric, axis: valueAxis, read: (t: SweepTrial) => t.value },
  ];
  const span = box.width - left - right;
  const step = columns.length > 1 ? span / (columns.length - 1) : 0;
  const xs = columns.map((_, i) => (columns.length > 1 ? left + i * step : left + span / 2));
  const yOf = (at: number) => box.height - bottom - at * (box.height - top - bottom);
  const best = bestTrial(sweep)?.number ?? null;
  const lines = sweep.trials.map((trial) => {
    let d = '';
    let drawing = false;
    columns.forEach((column, i) => {
      const at = position(column.axis, column.read(trial));
      if (at === null) {
        drawing = false;
        return;
      }
      d += `${d ? ' ' : ''}${drawing ? 'L' : 'M'}${round(xs[i] ?? 0)} ${round(yOf(at))}`;
      drawing = true;
    });
    return {
      number: trial.number,
      d,
      good: goodness(valueAxis, sweep.goal as Goal, trial.value),
      best: trial.number === best,
    };
  });
  const rank = (line: ParallelLine) => (line.best ? 2 : line.good === null ? -1 : line.good);
  lines.sort((a, b) => rank(a) - rank(b) || a.number - b.number);
  return {
    axes: columns.map((column, i) => ({ key: column.key, label: column.label, axis: column.axis, x: xs[i] ?? 0 })),
    lines,
    bottom: yOf(0),
    top: yOf(1),
  };
}

function round(n: number): number {
  return Math.round(n * 10) / 10;
}

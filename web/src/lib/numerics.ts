import type uPlot from 'uplot';

import type { MetricSeries } from '../api/client';

// What a low-precision run logs per Linear layer every `fp8_stats_every` steps
// (docs/workloads.md, `precision`): an fp8 run its amax and, with per-tensor scaling, its
// scales (services/crucible/training/precision/fp8.py FP8_STAT_NAMES; fp8_scaled.py STAT_NAMES for row
// and block scaling), an emulated mxfp8/nvfp4 run each GEMM operand's amax and the share of it
// that saturated or underflowed (training/precision/telemetry.py). Both log each layer's
// forward GEMM error against bf16's, `<prefix><layer>/matmul_rel_error`, and its largest over
// the layers as MATMUL_ERROR_MAX_KEY.
export const EMULATED_PREFIX = 'numerics/';
export const FP8_PREFIX = 'fp8/';

// The forward's operands, then dgrad's, then wgrad's: the order the matmuls run in.
export const EMULATED_OPERANDS = ['input', 'weight', 'grad_output', 'weight_t', 'grad_output_t', 'input_t'];
export const FP8_OPERANDS = ['input', 'weight', 'grad'];
// The amax history follows these: the transposed operands are the same tensors (NVFP4 rotates
// the wgrad ones by a Hadamard transform at most), so their lines would mostly repeat these.
export const AMAX_OPERANDS = ['input', 'weight', 'grad_output'];

// A layer's own stat, not an operand's: the name has no operand part.
export const MATMUL_ERROR = 'matmul_rel_error';
// The run-level series services/crucible/domain/metric_keys.py NUMERICS_MATMUL_ERROR_MAX names.
export const MATMUL_ERROR_MAX_KEY = 'precision/matmul_rel_error_max';

// MXFP8's default (ceil) scale rounding saturates nothing by construction, the floor rounding
// only a block's largest value now and then, and NVFP4 only blocks whose scales fall among
// E4M3's coarse subnormals. A share of 1% of an operand clipped is no longer the odd outlier
// but its tail cut off in bulk: the scales lag the data or the format's range is too short
// for it, and the loss tends to follow.
export const SATURATION_WARNING = 0.01;

// Warnings listed by name: a recipe gone wrong saturates in every layer at once, and a list of
// all of them (192 operands at 124M) would push the charts off the page.
export const WARNINGS_LISTED = 5;

// Lines on a drift chart: past about six, the colours repeat and the legend outgrows it.
export const DRIFT_LINES = 6;

export type ShareStat = 'saturated' | 'underflow';
export type EmulatedStat = ShareStat | 'amax';
export type Fp8Stat = 'amax' | 'scale';
export type NumericsFamily = 'emulated' | 'fp8';

export type NumericsKey =
  | { family: 'emulated'; layer: string; operand: string; stat: EmulatedStat }
  | { family: 'fp8'; layer: string; operand: string; stat: Fp8Stat }
  | { family: NumericsFamily; layer: string; stat: typeof MATMUL_ERROR };

/** True for the per-layer keys the Numerics section shows instead of a chart each. */
export function isNumericsKey(key: string): boolean {
  return key.startsWith(EMULATED_PREFIX) || key.startsWith(FP8_PREFIX);
}

/** `numerics/blocks.3.attn.qkv/grad_output_t_saturated` -> layer, operand, stat, and
 * `fp8/blocks.3.attn.qkv/matmul_rel_error` -> layer, stat; null for a key of another shape.
 * The operand is everything before the last underscore, since operand names hold underscores
 * themselves; the GEMM error, whose name holds them too, is matched whole first. */
export function parseNumericsKey(key: string): NumericsKey | null {
  const family = key.startsWith(EMULATED_PREFIX) ? 'emulated' : key.startsWith(FP8_PREFIX) ? 'fp8' : null;
  if (family === null) return null;
  const rest = key.slice(family === 'emulated' ? EMULATED_PREFIX.length : FP8_PREFIX.length);
  const slash = rest.lastIndexOf('/');
  if (slash <= 0) return null;
  const layer = rest.slice(0, slash);
  const name = rest.slice(slash + 1);
  if (name === MATMUL_ERROR) return { family, layer, stat: MATMUL_ERROR };
  const underscore = name.lastIndexOf('_');
  if (underscore <= 0) return null;
  const operand = name.slice(0, underscore);
  const stat = name.slice(underscore + 1);
  if (family === 'emulated' && (stat === 'saturated' || stat === 'underflow' || stat === 'amax')) {
    return { family, layer, operand, stat };
  }
  if (family === 'fp8' && (stat === 'amax' || stat === 'scale')) return { family, layer, operand, stat };
  return null;
}

/** Module order as a person reads it: `blocks.2` before `blocks.10`. */
export function compareLayers(a: string, b: string): number {
  return a.localeCompare(b, 'en', { numeric: true });
}

/** The known operands in matmul order, then any others the run logged, by name. */
function orderOperands(seen: Set<string>, known: string[]): string[] {
  const others = [...seen].filter((operand) => !known.includes(operand)).sort();
  return [...known.filter((operand) => seen.has(operand)), ...others];
}

/** A key's last point, as `GET /runs/{id}/metrics/keys` lists it. */
export interface LatestPoint {
  key: string;
  last_value: number | null;
}

export interface NumericsTable<Stat extends string> {
  /** Columns, in matmul order. */
  operands: string[];
  /** `error`: the layer's latest GEMM error against bf16, absent until a step sampled it. */
  rows: { layer: string; cells: Record<string, Partial<Record<Stat, number>>>; error?: number }[];
}

function latestTable<Stat extends string>(
  keys: LatestPoint[],
  family: NumericsKey['family'],
  known: string[],
): NumericsTable<Stat> {
  const layers = new Map<string, NumericsTable<Stat>['rows'][number]>();
  const operands = new Set<string>();
  for (const { key, last_value: value } of keys) {
    const parsed = parseNumericsKey(key);
    if (parsed?.family !== family || value === null) continue;
    const row = layers.get(parsed.layer) ?? { layer: parsed.layer, cells: {} };
    layers.set(parsed.layer, row);
    if (parsed.stat === MATMUL_ERROR) {
      row.error = value;
      continue;
    }
    (row.cells[parsed.operand] ??= {})[parsed.stat as Stat] = value;
    operands.add(parsed.operand);
  }
  const rows = [...layers.values()].sort((a, b) => compareLayers(a.layer, b.layer));
  return { operands: orderOperands(operands, known), rows };
}

function worstOf(cells: Record<string, Partial<Record<EmulatedStat, number>>>, stat: ShareStat): number {
  return Math.max(0, ...Object.values(cells).map((cell) => cell[stat] ?? 0));
}

/** Each layer's latest saturated and underflow shares (and amax) by operand, the worst saturation first
 * (then the worst underflow, then module order), or null when the run logged none. */
export function emulatedTable(keys: LatestPoint[]): NumericsTable<EmulatedStat> | null {
  const table = latestTable<EmulatedStat>(keys, 'emulated', EMULATED_OPERANDS);
  if (table.rows.length === 0) return null;
  table.rows.sort(
    (a, b) =>
      worstOf(b.cells, 'saturated') - worstOf(a.cells, 'saturated') ||
      worstOf(b.cells, 'underflow') - worstOf(a.cells, 'underflow') ||
      compareLayers(a.layer, b.layer),
  );
  return table;
}

/** Each layer's latest amax and scale (a row- or block-scaled run logs no scale) by operand,
 * in module order, or null without fp8 keys. */
export function fp8Table(keys: LatestPoint[]): NumericsTable<Fp8Stat> | null {
  const table = latestTable<Fp8Stat>(keys, 'fp8', FP8_OPERANDS);
  return table.rows.length === 0 ? null : table;
}

export interface Column<Stat extends string> {
  operand: string;
  stat: Stat;
}

/** The table's columns: each operand's stats that some layer logged, operands in matmul
 * order and stats in `stats` order (an fp8 run logs no scale for the gradient). */
export function columns<Stat extends string>(table: NumericsTable<Stat>, stats: Stat[]): Column<Stat>[] {
  return table.operands.flatMap((operand) =>
    stats
      .filter((stat) => table.rows.some(({ cells }) => cells[operand]?.[stat] !== undefined))
      .map((stat) => ({ operand, stat })),
  );
}

/** The layer whose latest GEMM error is the largest, or null before any step sampled one. */
export function worstError<Stat extends string>(table: NumericsTable<Stat>): { layer: string; error: number } | null {
  let worst: { layer: string; error: number } | null = null;
  for (const { layer, error } of table.rows) {
    if (error !== undefined && (worst === null || error > worst.error)) worst = { layer, error };
  }
  return worst;
}

export interface SaturationWarning {
  layer: string;
  operand: string;
  share: number;
}

/** Every operand whose latest saturated share reached SATURATION_WARNING, the worst first. */
export function saturationWarnings(table: NumericsTable<EmulatedStat>): SaturationWarning[] {
  const warnings = table.rows.flatMap(({ layer, cells }) =>
    Object.entries(cells)
      .filter(([, cell]) => (cell.saturated ?? 0) >= SATURATION_WARNING)
      .map(([operand, cell]) => ({ layer, operand, share: cell.saturated ?? 0 })),
  );
  return warnings.sort((a, b) => b.share - a.share || compareLayers(a.layer, b.layer));
}

export function warningText({ layer, operand, share }: SaturationWarning): string {
  return `layer ${layer} saturates ${sharePercent(share)} of its ${operand}`;
}

/** The worst WARNINGS_LISTED warnings' lines, and one counting the rest. */
export function warningLines(warnings: SaturationWarning[]): string[] {
  const lines = warnings.slice(0, WARNINGS_LISTED).map(warningText);
  const rest = warnings.length - WARNINGS_LISTED;
  return rest > 0 ? [...lines, `and ${rest} more, marked in the table below`] : lines;
}

/** "3.2%", "0.041%", "0%": two significant digits, since a share of a few in ten thousand
 * already says something that "0.0%" would hide. A relative error reads the same way. */
export function sharePercent(share: number | undefined): string {
  if (share === undefined) return '—';
  if (share === 0) return '0%';
  return `${Number((share * 100).toPrecision(2))}%`;
}

/** How strongly to tint a cell, 0..1: its value against the largest the scale allows.
 * Any non-zero value gets a visible tint, so a small share is not mistaken for none. */
export function shade(value: number | undefined, scaleMax: number): number {
  if (value === undefined || value <= 0 || scaleMax <= 0) return 0;
  return Math.min(1, Math.max(0.08, value / scaleMax));
}

/** The largest latest value of one stat in the table (of one operand's column, given one):
 * what its cells are tinted against. */
export function tableMax<Stat extends string>(table: NumericsTable<Stat>, stat: Stat, operand?: string): number {
  return Math.max(
    0,
    ...table.rows.flatMap(({ cells }) =>
      Object.entries(cells)
        .filter(([name]) => operand === undefined || name === operand)
        .map(([, cell]) => cell[stat] ?? 0),
    ),
  );
}

export interface WorstSeries {
  steps: number[];
  values: number[];
  /** The key that was worst at each point. */
  keys: string[];
}

/**
 * The largest value of one stat over every layer and operand, along the steps.
 *
 * The server cuts each series on its own, keeping each bucket's lowest and highest point, so
 * two series' kept steps need not match. When all the steps together are no more than
 * `buckets`, the worst is taken step by step; past that, the steps are cut into `buckets`
 * equal spans and each span keeps its highest point: the peaks the server kept survive either way.
 */
export function worstSeries(series: MetricSeries[], stat: ShareStat, buckets: number): WorstSeries {
  const points: { step: number; value: number; key: string }[] = [];
  for (const one of series) {
    const parsed = parseNumericsKey(one.key);
    if (parsed?.family !== 'emulated' || parsed.stat !== stat) continue;
    one.steps.forEach((step, index) => points.push({ step, value: one.values[index] ?? 0, key: one.key }));
  }
  points.sort((a, b) => a.step - b.step);
  const first = points[0]?.step ?? 0;
  const span = (points.at(-1)?.step ?? 0) - first + 1;
  const distinct = new Set(points.map((point) => point.step)).size;
  const width = distinct <= buckets ? 0 : span / buckets;
  const bucketOf = (step: number) => (width === 0 ? step : Math.floor((step - first) / width));
  const peaks: typeof points = [];
  let bucket: number | undefined;
  for (const point of points) {
    const at = bucketOf(point.step);
    if (at !== bucket) {
      bucket = at;
      peaks.push(point);
    } else if (point.value > (peaks.at(-1)?.value ?? -Infinity)) {
      peaks[peaks.length - 1] = point;
    }
  }
  return {
    steps: peaks.map((peak) => peak.step),
    values: peaks.map((peak) => peak.value),
    keys: peaks.map((peak) => peak.key),
  };
}

export interface Line {
  steps: number[];
  values: number[];
}

/** Lines on one step axis for uPlot: the union of their steps, null where a line has no point. */
export function alignOnSteps(lines: Line[], steps: number[] = stepUnion(lines)): uPlot.AlignedData {
  const index = new Map(steps.map((step, i) => [step, i]));
  const columns = lines.map((line) => {
    const column: (number | null)[] = new Array<number | null>(steps.length).fill(null);
    line.steps.forEach((step, i) => {
      const at = index.get(step);
      if (at !== undefined) column[at] = line.values[i] ?? null;
    });
    return column;
  });
  return [steps, ...columns];
}

/** Every step any of the lines has, in order: what charts meant to be read side by side share. */
export function stepUnion(lines: Line[]): number[] {
  return [...new Set(lines.flatMap((line) => line.steps))].sort((a, b) => a - b);
}

export interface ScaleDrift extends Line {
  layer: string;
  /** The farthest the ratio went from 1, as a factor either way (halving and doubling are both 2). */
  largest: number;
}

export interface AmaxDrift extends ScaleDrift {
  operand: string;
}

/** A series as a ratio to its first value, or null when that is not positive. */
function ratioToFirst(one: MetricSeries): Omit<ScaleDrift, 'layer'> | null {
  const start = one.values[0];
  if (start === undefined || start <= 0) return null;
  const values = one.values.map((value) => value / start);
  const largest = Math.max(...values.map((ratio) => (ratio > 0 ? Math.max(ratio, 1 / ratio) : Infinity)));
  return { steps: one.steps, values, largest };
}

function farthestFirst<Drift extends ScaleDrift>(drifts: Drift[], limit: number): Drift[] {
  drifts.sort((a, b) => b.largest - a.largest || compareLayers(a.layer, b.layer));
  return drifts.slice(0, limit);
}

/**
 * Each fp8 layer's input scale as a ratio to its first logged value, the `limit` layers that
 * drifted farthest first. A scale is the format's largest value over the tensor's amax, so a
 * ratio of 0.1 means the layer's inputs grew tenfold since the run's start.
 */
export function scaleDrift(series: MetricSeries[], limit: number = DRIFT_LINES): ScaleDrift[] {
  const drifts: ScaleDrift[] = [];
  for (const one of series) {
    const parsed = parseNumericsKey(one.key);
    if (parsed?.family !== 'fp8' || parsed.stat !== 'scale' || parsed.operand !== 'input') continue;
    const drift = ratioToFirst(one);
    if (drift) drifts.push({ layer: parsed.layer, ...drift });
  }
  return farthestFirst(drifts, limit);
}

/**
 * An emulated run's amax history: each layer's AMAX_OPERANDS amax as a ratio to its first
 * logged value, the `limit` that drifted farthest first. Block scales follow the amax, so a
 * drift is harmless on its own; beside a saturated or underflow share it says which way the
 * operand's values moved.
 */
export function amaxDrift(series: MetricSeries[], limit: number = DRIFT_LINES): AmaxDrift[] {
  const drifts: AmaxDrift[] = [];
  for (const one of series) {
    const parsed = parseNumericsKey(one.key);
    if (parsed?.family !== 'emulated' || parsed.stat !== 'amax' || !AMAX_OPERANDS.includes(parsed.operand)) continue;
    const drift = ratioToFirst(one);
    if (drift) drifts.push({ layer: parsed.layer, operand: parsed.operand, ...drift });
  }
  return farthestFirst(drifts, limit);
}

/**
 * The keys split into requests whose `keys=` parameter stays under `maxChars`. An emulated
 * 124M run logs several hundred numerics keys, tens of thousands of characters together: past
 * the 16 KiB that Node (the dashboard's dev and preview proxy) and uvicorn's h11 accept in a
 * request's head.
 */
export function chunkKeys(keys: string[], maxChars: number): string[][] {
  const chunks: string[][] = [];
  let current: string[] = [];
  let length = 0;
  for (const key of keys) {
    const added = encodeURIComponent(key).length + 1;
    if (current.length > 0 && length + added > maxChars) {
      chunks.push(current);
      current = [];
      length = 0;
    }
    current.push(key);
    length += added;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

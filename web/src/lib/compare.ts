import type uPlot from 'uplot';

import type { MetricSeries } from '../api/client';

/**
 * One chart's data for several runs' series of the same metric: uPlot wants one shared x
 * array, so the steps are merged and each run gets null where it has no point.
 */
export function alignSeries(series: (MetricSeries | undefined)[]): uPlot.AlignedData {
  const steps = [...new Set(series.flatMap((s) => s?.steps ?? []))].sort((a, b) => a - b);
  const index = new Map(steps.map((step, i) => [step, i]));
  const lines = series.map((s) => {
    const values: (number | null)[] = new Array<number | null>(steps.length).fill(null);
    s?.steps.forEach((step, i) => {
      values[index.get(step) ?? 0] = s.values[i] ?? null;
    });
    return values;
  });
  return [steps, ...lines];
}

/** Every metric key any of the runs logged, sorted. */
export function metricKeys(series: (MetricSeries[] | undefined)[]): string[] {
  return [...new Set(series.flatMap((list) => list?.map((s) => s.key) ?? []))].sort();
}

/** `{a: {b: 1}, c: [2]}` -> `{'a.b': '1', 'c[0]': '2'}`: leaves as text, for a diff. */
export function flatten(value: unknown, prefix = '', into: Record<string, string> = {}): Record<string, string> {
  if (Array.isArray(value) && value.length > 0) {
    value.forEach((item, i) => flatten(item, `${prefix}[${i}]`, into));
  } else if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0) {
    for (const [key, item] of Object.entries(value)) flatten(item, prefix ? `${prefix}.${key}` : key, into);
  } else if (prefix) {
    into[prefix] = typeof value === 'string' ? value : JSON.stringify(value);
  }
  return into;
}

export interface DiffRow {
  path: string;
  values: (string | undefined)[];
  differs: boolean;
}

/** The settings of several runs side by side, a row per path, flagged where they disagree. */
export function configDiff(configs: unknown[]): DiffRow[] {
  const flat = configs.map((config) => flatten(config));
  const paths = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
  return paths.map((path) => {
    const values = flat.map((f) => f[path]);
    return { path, values, differs: new Set(values).size > 1 };
  });
}

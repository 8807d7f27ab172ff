import type { EvalResult } from '../api/client';

/** A column of the checkpoints table: one metric of one eval suite. */
export interface EvalColumn {
  key: string;
  suite: string;
  metric: string;
}

/** Every (suite, metric) any result reports, sorted so the columns stay put as results arrive. */
export function evalColumns(results: EvalResult[]): EvalColumn[] {
  const columns = new Map<string, EvalColumn>();
  for (const result of results) {
    for (const metric of Object.keys(result.scores)) {
      const key = `${result.suite}/${metric}`;
      if (!columns.has(key)) columns.set(key, { key, suite: result.suite, metric });
    }
  }
  return [...columns.values()].sort((a, b) => a.suite.localeCompare(b.suite) || a.metric.localeCompare(b.metric));
}

/**
 * Scores per checkpoint id, keyed like the columns. When a suite scored a checkpoint more than
 * once the newest result is shown.
 */
export function scoresByCheckpoint(results: EvalResult[]): Map<number, Map<string, number>> {
  const ordered = [...results].sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at) || a.id - b.id);
  const table = new Map<number, Map<string, number>>();
  for (const result of ordered) {
    const row = table.get(result.checkpoint_id) ?? new Map<string, number>();
    for (const [metric, value] of Object.entries(result.scores)) row.set(`${result.suite}/${metric}`, value);
    table.set(result.checkpoint_id, row);
  }
  return table;
}

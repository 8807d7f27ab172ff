import { describe, expect, it } from 'vitest';

import type { MetricSeries } from '../api/client';
import { alignSeries, configDiff, flatten, metricKeys } from './compare';

function series(key: string, steps: number[], values: number[]): MetricSeries {
  return { key, steps, values, times: steps.map(() => 0), total_points: steps.length, downsampled: false };
}

describe('alignSeries', () => {
  it('merges the steps and leaves a gap where a run has no point', () => {
    const data = alignSeries([series('loss', [0, 10, 20], [3, 2, 1]), undefined, series('loss', [10, 15], [5, 4])]);
    expect(data).toEqual([
      [0, 10, 15, 20],
      [3, 2, null, 1],
      [null, null, null, null],
      [null, 5, 4, null],
    ]);
  });

  it('lists the keys any run logged', () => {
    expect(metricKeys([[series('b', [], [])], undefined, [series('a', [], []), series('b', [], [])]])).toEqual(['a', 'b']);
  });
});

describe('configDiff', () => {
  it('flattens nested settings into paths', () => {
    expect(flatten({ spec: { config: { lr: 0.001 }, args: ['--x', 2], env: [] }, name: 'a' })).toEqual({
      'spec.config.lr': '0.001',
      'spec.args[0]': '--x',
      'spec.args[1]': '2',
      'spec.env': '[]',
      name: 'a',
    });
  });

  it('flags the settings the runs disagree on, including one only some have', () => {
    const rows = configDiff([
      { lr: 0.1, steps: 100, seed: 1 },
      { lr: 0.01, steps: 100 },
    ]);
    expect(rows).toEqual([
      { path: 'lr', values: ['0.1', '0.01'], differs: true },
      { path: 'seed', values: ['1', undefined], differs: true },
      { path: 'steps', values: ['100', '100'], differs: false },
    ]);
  });
});

import { describe, expect, it } from 'vitest';

import type { MetricSeries } from '../api/client';
import { RL_KEYS, seconds, summarizeRl, trainerBar } from './rlHealth';

function series(key: string, points: [number, number][]): MetricSeries {
  return {
    key,
    steps: points.map(([step]) => step),
    values: points.map(([, value]) => value),
    times: points.map(() => 1_700_000_000),
    total_points: points.length,
    downsampled: false,
  };
}

describe('summarizeRl', () => {
  it('is null for a run that logged no rl/ metrics', () => {
    expect(summarizeRl([series('loss', [[1, 0.5]])])).toBeNull();
    expect(summarizeRl([])).toBeNull();
  });

  it('splits each round by phase and sums the run', () => {
    const summary = summarizeRl([
      series('loss', [[1, 0.5]]),
      series('rl/wall_s', [[2, 6], [1, 4]]),
      series('rl/idle_s', [[1, 1], [2, 3]]),
      series('rl/train_s', [[1, 2.5], [2, 2]]),
      series('rl/generate_s', [[1, 1], [2, 3]]),
      series('rl/samples_accepted', [[1, 8], [2, 6]]),
      series('rl/discarded_stale', [[1, 0], [2, 2]]),
      series('rl/generators_behind', [[1, 1], [2, 1]]),
      series('rl/kl', [[1, 0], [2, 0.01]]),
    ]);
    expect(summary?.rounds).toEqual([
      { step: 1, seconds: { wall: 4, idle: 1, train: 2.5, generate: 1 } },
      { step: 2, seconds: { wall: 6, idle: 3, train: 2, generate: 3 } },
    ]);
    expect(summary?.totals).toEqual({ wall: 10, idle: 4, train: 4.5, generate: 4 });
    expect(summary?.idleShare).toBeCloseTo(0.4);
    expect(summary?.counts).toEqual({ samplesAccepted: 14, discardedStale: 2, generatorsBehind: 2 });
    expect(summary?.latest).toEqual({ kl: { step: 2, value: 0.01 } });
  });

  it('has no idle share without the wall time to divide by', () => {
    const summary = summarizeRl([series('rl/idle_s', [[1, 1]])]);
    expect(summary?.idleShare).toBeUndefined();
    expect(summary?.rounds).toEqual([{ step: 1, seconds: { idle: 1 } }]);
  });

  it('reads every key it asks the server for', () => {
    const summary = summarizeRl(RL_KEYS.map((key) => series(key, [[1, 1]])));
    const read = [
      ...Object.keys(summary?.rounds[0]?.seconds ?? {}),
      ...Object.keys(summary?.counts ?? {}),
      ...Object.keys(summary?.latest ?? {}),
    ];
    expect(read).toHaveLength(RL_KEYS.length);
  });
});

describe('trainerBar', () => {
  it('puts what the phases leave of the wall time under other, scaled to the widest round', () => {
    const bar = trainerBar({ step: 1, seconds: { wall: 5, train: 2, weightUpdate: 0.5, idle: 1.5, generate: 9 } }, 10);
    expect(bar).toEqual([
      { part: 'train', seconds: 2, width: 0.2 },
      { part: 'weightUpdate', seconds: 0.5, width: 0.05 },
      { part: 'idle', seconds: 1.5, width: 0.15 },
      { part: 'other', seconds: 1, width: 0.1 },
    ]);
  });

  it('leaves generation out: it overlaps training or is the idle time', () => {
    const bar = trainerBar({ step: 1, seconds: { train: 1, generate: 3 } }, 1);
    expect(bar.map((p) => p.part)).toEqual(['train']);
  });
});

describe('seconds', () => {
  it('keeps the detail a short round needs', () => {
    expect(seconds(0.421)).toBe('0.42s');
    expect(seconds(12.34)).toBe('12.3s');
    expect(seconds(245)).toBe('4m 05s');
    expect(seconds(undefined)).toBe('—');
  });
});

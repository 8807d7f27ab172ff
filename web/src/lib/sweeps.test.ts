import { describe, expect, it } from 'vitest';

import {
  bestTrial,
  formatValue,
  goodness,
  metricAxis,
  numericAxis,
  parallelLayout,
  parameterAxis,
  parameterPaths,
  position,
  rampColor,
  scatterPoints,
  sortTrials,
  ticks,
  toggleTrialSort,
  trialStatus,
  type Box,
  type Sweep,
  type SweepTrial,
} from './sweeps';

function trial(number: number, lr: number | undefined, value: number | null, extra: Partial<SweepTrial> = {}): SweepTrial {
  return {
    number,
    run_id: 100 + number,
    run_name: `lr-${String(number).padStart(3, '0')}`,
    phase: 'Succeeded',
    point: lr === undefined ? {} : { 'config.train.lr': lr },
    value,
    step: value === null ? null : 100,
    stopped_reason: null,
    ...extra,
  };
}

function sweep(trials: SweepTrial[], extra: Partial<Sweep> = {}): Sweep {
  return {
    id: 1,
    project_id: 1,
    name: 'lr',
    backend: 'local',
    phase: 'Running',
    message: '',
    manifest: { spec: { parameters: { 'config.train.lr': { values: [0.1, 0.01, 0.001] } } } },
    spec_digest: 'sha256:0',
    code: null,
    metric: 'loss',
    goal: 'minimize',
    budget: 3,
    best_trial: null,
    k8s_uid: null,
    created_at: '2026-01-01T00:00:00Z',
    finished_at: null,
    trials,
    ...extra,
  };
}

const BOX: Box = { width: 300, height: 200, margin: [10, 10, 20, 40] };

describe('axes', () => {
  it('puts a declared log range on a log scale, its ends from the declaration', () => {
    const axis = numericAxis([0.001], { min: 1e-5, max: 1e-1, log: true });
    expect(axis).toEqual({ kind: 'log', min: 1e-5, max: 1e-1 });
    expect(position(axis, 1e-3)).toBeCloseTo(0.5);
    expect(position(axis, 0)).toBeNull();
    expect(ticks(axis).map((t) => t.label)).toEqual(['0.00001', '0.0001', '0.001', '0.01', '0.1']);
  });

  it('chooses log for values spanning two decades or more, linear for less', () => {
    expect(numericAxis([1e-4, 1e-1]).kind).toBe('log');
    expect(numericAxis([1e-3, 1e-1]).kind).toBe('log');
    expect(numericAxis([1e-3, 5e-2]).kind).toBe('linear');
    expect(numericAxis([-1, 1000]).kind).toBe('linear');
  });

  it('widens a declared range to the values seen and places them linearly', () => {
    const axis = numericAxis([12], { min: 0, max: 10 });
    expect(axis).toEqual({ kind: 'linear', min: 0, max: 12 });
    expect(position(axis, 3)).toBeCloseTo(0.25);
    expect(ticks(axis)).toEqual([
      { at: 0, label: '0' },
      { at: 0.5, label: '6' },
      { at: 1, label: '12' },
    ]);
  });

  it('centres a single value rather than dividing by zero', () => {
    const axis = numericAxis([5]);
    expect(position(axis, 5)).toBe(0.5);
    expect(ticks(axis)).toEqual([{ at: 0.5, label: '5' }]);
  });

  it('makes categories of non-numbers, in the declared order, spaced evenly', () => {
    const axis = parameterAxis(['adamw', 'sgd'], { values: ['sgd', 'adamw', 'lion'] });
    expect(axis).toEqual({ kind: 'category', values: ['sgd', 'adamw', 'lion'] });
    expect(position(axis, 'adamw')).toBe(0.5);
    expect(position(axis, 'lion')).toBe(1);
    expect(position(axis, 'rmsprop')).toBeNull();
    expect(position(parameterAxis([true]), true)).toBe(0.5);
  });

  it('reads a choice of numbers as numbers', () => {
    expect(parameterAxis([2], { values: [1, 2, 4] })).toEqual({ kind: 'linear', min: 1, max: 4 });
    expect(parameterAxis([0.01], { values: [0.1, 0.01, 0.001] })).toEqual({ kind: 'log', min: 0.001, max: 0.1 });
  });
});

describe('trials', () => {
  const stopped = trial(2, 0.001, 3, { phase: 'Cancelled', step: 10, stopped_reason: 'stopped by ASHA at step 10' });
  const running = trial(3, 0.1, 0.2, { phase: 'Running' });
  const trials = [trial(0, 0.1, 1), trial(1, 0.01, 0.5), stopped, running];

  it('tells stopped, finished, failed and running trials apart', () => {
    expect(trials.map(trialStatus)).toEqual(['finished', 'finished', 'stopped', 'running']);
    expect(trialStatus(trial(4, 0.1, null, { phase: 'Failed' }))).toBe('failed');
  });

  it("takes the sweep's best once it has ended, the finished leader before", () => {
    expect(bestTrial(sweep(trials))).toEqual({ number: 1, final: false });
    expect(bestTrial(sweep(trials, { goal: 'maximize' }))).toEqual({ number: 0, final: false });
    expect(bestTrial(sweep(trials, { best_trial: 0 }))).toEqual({ number: 0, final: true });
    expect(bestTrial(sweep([running]))).toBeNull();
  });

  it('sorts by the metric either way, trials without a value last', () => {
    const pending = trial(5, 0.1, null, { phase: 'Pending' });
    const all = [pending, ...trials];
    expect(sortTrials(all, { key: 'value', descending: false }).map((t) => t.number)).toEqual([3, 1, 0, 2, 5]);
    expect(sortTrials(all, { key: 'value', descending: true }).map((t) => t.number)).toEqual([2, 0, 1, 3, 5]);
    expect(sortTrials(all, { key: 'number', descending: true }).map((t) => t.number)).toEqual([5, 3, 2, 1, 0]);
  });

  it('sorts the metric best first on the first click, then turns it around', () => {
    const byNumber = { key: 'number' as const, descending: false };
    expect(toggleTrialSort(byNumber, 'value', 'minimize')).toEqual({ key: 'value', descending: false });
    expect(toggleTrialSort(byNumber, 'value', 'maximize')).toEqual({ key: 'value', descending: true });
    expect(toggleTrialSort({ key: 'value', descending: false }, 'value', 'minimize')).toEqual({ key: 'value', descending: true });
  });

  it('lists the parameters declared, then any only a point has', () => {
    expect(parameterPaths(sweep([trial(0, 0.1, 1, { point: { 'config.train.lr': 0.1, 'config.seed': 3 } })]))).toEqual([
      'config.train.lr',
      'config.seed',
    ]);
  });
});

describe('scatterPoints', () => {
  it('places each trial with a value inside the margins, the best last', () => {
    const x = numericAxis([], { min: 0.001, max: 0.1, log: true });
    const y = metricAxis([trial(0, 0.1, 1), trial(1, 0.01, 0.5)]);
    const points = scatterPoints([trial(1, 0.01, 0.5), trial(0, 0.1, 1), trial(2, 0.01, null)], 'config.train.lr', x, y, BOX, 1);
    expect(points).toEqual([
      { number: 0, x: 290, y: 10, status: 'finished', best: false },
      { number: 1, x: 165, y: 180, status: 'finished', best: true },
    ]);
  });
});

describe('parallelLayout', () => {
  it('draws an axis per parameter and the metric, a line per trial, the best on top', () => {
    const stopped = trial(2, 0.001, 3, { phase: 'Cancelled', stopped_reason: 'stopped by ASHA' });
    const layout = parallelLayout(sweep([trial(0, 0.1, 1), trial(1, 0.01, 0.5), stopped], { best_trial: 1 }), BOX);
    expect(layout.axes.map((a) => [a.label, a.x])).toEqual([
      ['train.lr', 40],
      ['loss', 290],
    ]);
    expect(layout.top).toBe(10);
    expect(layout.bottom).toBe(180);
    // Worst (trial 2, loss 3) first; the best (trial 1, lowest loss) last. Loss 1 is a
    // fifth of the way up 0.5..3; lr 0.01 half way along 0.001..0.1 (two decades: log).
    expect(layout.lines.map((l) => l.number)).toEqual([2, 0, 1]);
    const byNumber = Object.fromEntries(layout.lines.map((l) => [l.number, l]));
    expect(byNumber[0]?.d).toBe('M40 10 L290 146');
    expect(byNumber[1]?.d).toBe('M40 95 L290 180');
    expect(byNumber[1]?.best).toBe(true);
    expect(byNumber[1]?.good).toBe(1);
    expect(byNumber[2]?.good).toBe(0);
  });

  it('breaks a line where a trial has no value yet, and puts it under the rest', () => {
    const layout = parallelLayout(sweep([trial(0, 0.1, 1), trial(1, 0.01, null, { phase: 'Running' })]), BOX);
    expect(layout.lines.map((l) => l.number)).toEqual([1, 0]);
    expect(layout.lines[0]?.d).toBe('M40 95');
    expect(layout.lines[0]?.good).toBeNull();
  });
});

describe('colours and values', () => {
  it('ramps from the worst colour to the best, grey without a value', () => {
    expect(rampColor(0)).toBe('rgb(68, 1, 84)');
    expect(rampColor(1)).toBe('rgb(170, 220, 50)');
    expect(rampColor(0.125)).toBe('rgb(64, 42, 112)');
    expect(rampColor(null)).toBe('var(--muted)');
    expect(goodness(numericAxis([1, 3]), 'minimize', 1)).toBe(1);
    expect(goodness(numericAxis([1, 3]), 'maximize', 1)).toBe(0);
  });

  it('shows numbers to four significant digits and other values as JSON', () => {
    expect(formatValue(0.000123456)).toBe('0.0001235');
    expect(formatValue('adamw')).toBe('adamw');
    expect(formatValue([1, 2])).toBe('[1,2]');
    expect(formatValue(null)).toBe('—');
  });
});

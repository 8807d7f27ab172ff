import type { MetricSeries } from '../api/client';
import { duration } from '../format';

// What an online RL run logs at the step of each round (RoundHealth.metrics in
// services/crucible/online_rl/health.py, under `rl/`), of which the RL health section reads these.
const TIME_KEYS = {
  wall: 'rl/wall_s',
  generate: 'rl/generate_s',
  train: 'rl/train_s',
  weightUpdate: 'rl/weight_update_s',
  idle: 'rl/idle_s',
} as const;
const COUNT_KEYS = {
  episodes: 'rl/episodes',
  episodesFailed: 'rl/episodes_failed',
  samplesAccepted: 'rl/samples_accepted',
  samplesTrained: 'rl/samples_trained',
  discardedStale: 'rl/discarded_stale',
  // Logged only with a pool of generators (`generator: process` or `pod`).
  generatorsBehind: 'rl/generators_behind',
  generatorsDropped: 'rl/generators_dropped',
} as const;
const AGREEMENT_KEYS = {
  kl: 'rl/kl',
  ratioMean: 'rl/ratio_mean',
  logprobDiffMax: 'rl/logprob_diff_max',
} as const;

export const RL_KEYS: string[] = [
  ...Object.values(TIME_KEYS),
  ...Object.values(COUNT_KEYS),
  ...Object.values(AGREEMENT_KEYS),
];

type Phase = keyof typeof TIME_KEYS;
type Count = keyof typeof COUNT_KEYS;
type Agreement = keyof typeof AGREEMENT_KEYS;

/** One round's seconds by phase; a phase the round did not log is absent. */
export interface Round {
  step: number;
  seconds: Partial<Record<Phase, number>>;
}

/** The trainer's part of a round's bar: the phases it spends the round's wall time in. */
export interface BarPart {
  part: 'train' | 'weightUpdate' | 'idle' | 'other';
  seconds: number;
  /** Of the widest bar shown, so that rounds compare by length as well as by split. */
  width: number;
}

export interface RlSummary {
  rounds: Round[];
  totals: Partial<Record<Phase, number>>;
  /** sum(idle) / sum(wall) over the rounds that logged both: the trainer waiting for samples. */
  idleShare: number | undefined;
  counts: Partial<Record<Count, number>>;
  latest: Partial<Record<Agreement, { step: number; value: number }>>;
}

function sum(values: number[]): number {
  return values.reduce((total, value) => total + value, 0);
}

/** The run's RL health from its `rl/` series at full detail, or null when it has none. Sums
 * over a downsampled series would be wrong, so the series must not be cut. */
export function summarizeRl(series: MetricSeries[]): RlSummary | null {
  const byKey = new Map(series.filter((s) => s.key.startsWith('rl/')).map((s) => [s.key, s]));
  if (byKey.size === 0) return null;

  const rounds = new Map<number, Round>();
  const totals: RlSummary['totals'] = {};
  for (const [phase, key] of Object.entries(TIME_KEYS) as [Phase, string][]) {
    const found = byKey.get(key);
    if (!found) continue;
    totals[phase] = sum(found.values);
    found.steps.forEach((step, index) => {
      const round = rounds.get(step) ?? { step, seconds: {} };
      round.seconds[phase] = found.values[index];
      rounds.set(step, round);
    });
  }
  const timed = [...rounds.values()].filter((r) => r.seconds.wall !== undefined && r.seconds.idle !== undefined);
  const wall = sum(timed.map((r) => r.seconds.wall ?? 0));

  const counts: RlSummary['counts'] = {};
  for (const [count, key] of Object.entries(COUNT_KEYS) as [Count, string][]) {
    const found = byKey.get(key);
    if (found) counts[count] = sum(found.values);
  }
  const latest: RlSummary['latest'] = {};
  for (const [agreement, key] of Object.entries(AGREEMENT_KEYS) as [Agreement, string][]) {
    const found = byKey.get(key);
    const step = found?.steps.at(-1);
    const value = found?.values.at(-1);
    if (step !== undefined && value !== undefined) latest[agreement] = { step, value };
  }
  return {
    rounds: [...rounds.values()].sort((a, b) => a.step - b.step),
    totals,
    idleShare: wall > 0 ? sum(timed.map((r) => r.seconds.idle ?? 0)) / wall : undefined,
    counts,
    latest,
  };
}

/**
 * A round's wall time as the trainer spent it: training, copying weights, waiting for samples
 * (idle), and the rest (accepting batches, bookkeeping). Generation is not a part: with a
 * batch generated ahead it runs beside training, and in a synchronous round it is the idle time.
 */
export function trainerBar(round: Round, widest: number): BarPart[] {
  const { train = 0, weightUpdate = 0, idle = 0 } = round.seconds;
  const wall = roundLength(round);
  const parts: BarPart[] = [
    { part: 'train', seconds: train, width: 0 },
    { part: 'weightUpdate', seconds: weightUpdate, width: 0 },
    { part: 'idle', seconds: idle, width: 0 },
    { part: 'other', seconds: Math.max(0, wall - train - weightUpdate - idle), width: 0 },
  ];
  return parts
    .filter((p) => p.seconds > 0)
    .map((p) => ({ ...p, width: widest > 0 ? p.seconds / widest : 0 }));
}

/** A round's length, for scaling the bars: its wall time, or its parts' sum without one. */
export function roundLength(round: Round): number {
  const { wall, train = 0, weightUpdate = 0, idle = 0 } = round.seconds;
  return wall ?? train + weightUpdate + idle;
}

/** "0.42s", "12.3s", "4m 05s": RL rounds of a small model last well under a second. */
export function seconds(value: number | undefined): string {
  if (value === undefined) return '—';
  if (value < 10) return `${value.toFixed(2)}s`;
  if (value < 60) return `${value.toFixed(1)}s`;
  return duration(value);
}

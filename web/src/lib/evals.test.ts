import { describe, expect, it } from 'vitest';

import type { EvalResult } from '../api/client';
import { evalColumns, scoresByCheckpoint } from './evals';

function result(id: number, checkpoint: number, suite: string, scores: Record<string, number>, at: string): EvalResult {
  return { id, checkpoint_id: checkpoint, run_id: 1, step: checkpoint * 100, eval_run_id: null, suite, scores, created_at: at };
}

const results = [
  result(1, 1, 'heldout', { accuracy: 0.2 }, '2026-01-01T00:00:00Z'),
  result(2, 2, 'heldout', { accuracy: 0.7, loss: 0.3 }, '2026-01-01T00:01:00Z'),
  result(3, 2, 'arith', { exact: 0.5 }, '2026-01-01T00:02:00Z'),
  result(4, 2, 'heldout', { accuracy: 0.8 }, '2026-01-01T00:03:00Z'),
];

describe('evalColumns', () => {
  it('lists every suite and metric once, sorted', () => {
    expect(evalColumns(results).map((c) => c.key)).toEqual(['arith/exact', 'heldout/accuracy', 'heldout/loss']);
  });
});

describe('scoresByCheckpoint', () => {
  it('keeps the newest score when a suite ran twice on a checkpoint', () => {
    const table = scoresByCheckpoint([...results].reverse());
    expect(table.get(1)?.get('heldout/accuracy')).toBe(0.2);
    expect(table.get(2)?.get('heldout/accuracy')).toBe(0.8);
    expect(table.get(2)?.get('heldout/loss')).toBe(0.3);
    expect(table.get(2)?.get('arith/exact')).toBe(0.5);
  });
});

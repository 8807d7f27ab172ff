import { describe, expect, it } from 'vitest';

import type { CheckpointBrief, Deployment } from '../api/client';
import { checkpointLabel, readiness, rollout } from './deployments';

function brief(id: number, step: number): CheckpointBrief {
  return { id, run_id: 3, run_name: 'sft-1', step, uri: `file:///ckpt/${step}` };
}

function deployment(extra: Partial<Deployment> = {}): Deployment {
  return {
    id: 1,
    project: 'alpha',
    backend: 'kubernetes',
    name: 'chat',
    uid: null,
    checkpoint: { id: null, run: 'sft-1', checkpoint: 'latest' },
    checkpoint_id: 12,
    resolved: brief(12, 2000),
    resolve_error: null,
    serving_checkpoint_id: 12,
    serving: brief(12, 2000),
    replicas: 2,
    ready_replicas: 1,
    phase: 'Ready',
    message: '',
    url: null,
    created_at: '2026-12-05T09:00:00Z',
    updated_at: '2026-12-05T09:00:00Z',
    ...extra,
  };
}

describe('checkpointLabel', () => {
  it('names the checkpoint, its run and step', () => {
    expect(checkpointLabel(brief(12, 2000))).toBe('12 · sft-1 step 2,000');
  });
  it('is a dash before any pod serves one', () => {
    expect(checkpointLabel(null)).toBe('—');
  });
});

describe('rollout', () => {
  it('says when the pods serve what the reference names', () => {
    expect(rollout(deployment())).toBe('serving what it names');
  });
  it('names the checkpoint a rolling deployment moves to', () => {
    expect(rollout(deployment({ checkpoint_id: 13, resolved: brief(13, 3000), phase: 'Rolling' }))).toBe(
      'wants 13 · sft-1 step 3,000',
    );
  });
  it('gives the reason a reference does not resolve', () => {
    const broken = deployment({ checkpoint_id: null, resolved: null, resolve_error: "run 'x' does not exist" });
    expect(rollout(broken)).toBe("reference does not resolve: run 'x' does not exist");
  });
});

describe('readiness', () => {
  it('is ready of wanted replicas', () => {
    expect(readiness(deployment())).toBe('1 / 2');
  });
});

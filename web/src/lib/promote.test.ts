import { describe, expect, it } from 'vitest';

import type { CheckpointBrief, Deployment } from '../api/client';
import { acceptedSentence, deploymentOption, promotable, promotionQuestion } from './promote';

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
    checkpoint: { id: 12, run: null, checkpoint: 'latest' },
    checkpoint_id: 12,
    resolved: brief(12, 2000),
    resolve_error: null,
    serving_checkpoint_id: 12,
    serving: brief(12, 2000),
    replicas: 2,
    ready_replicas: 2,
    phase: 'Ready',
    message: '',
    url: null,
    created_at: '2026-12-05T09:00:00Z',
    updated_at: '2026-12-05T09:00:00Z',
    ...extra,
  };
}

describe('promotable', () => {
  it('offers only Kubernetes deployments, by name', () => {
    const offered = promotable([
      deployment({ id: 1, name: 'zeta' }),
      deployment({ id: 2, name: 'laptop', backend: 'local' }),
      deployment({ id: 3, name: 'alpha' }),
    ]);
    expect(offered.map((d) => d.name)).toEqual(['alpha', 'zeta']);
  });
});

describe('deploymentOption', () => {
  it('says what the deployment serves now', () => {
    expect(deploymentOption(deployment(), 14)).toBe('chat — serving 12 · sft-1 step 2,000');
  });
  it('says when it already wants this checkpoint', () => {
    expect(deploymentOption(deployment(), 12)).toBe('chat — already serves this checkpoint');
  });
  it('says when no pod serves anything yet', () => {
    expect(deploymentOption(deployment({ serving: null, serving_checkpoint_id: null }), 14)).toBe('chat — serving nothing yet');
  });
});

describe('promotionQuestion', () => {
  it('names the deployment and both checkpoints', () => {
    expect(promotionQuestion(deployment(), { id: 14, step: 3000 }, 'sft-2')).toBe(
      'Promote checkpoint 14 (sft-2 step 3,000) to deployment chat in alpha? Its live endpoint moves from checkpoint 12 · sft-1 step 2,000 to this checkpoint: new pods start beside the old ones, one at a time.',
    );
  });
  it('warns that a deployment following a run stops following it', () => {
    const following = deployment({ checkpoint: { id: null, run: 'sft-1', checkpoint: 'best:accuracy' }, serving: null });
    expect(promotionQuestion(following, { id: 14, step: 30 }, 'sft-1')).toBe(
      "Promote checkpoint 14 (sft-1 step 30) to deployment chat in alpha? Its live endpoint moves to this checkpoint: new pods start beside the old ones, one at a time. It stops following run sft-1's best:accuracy.",
    );
  });
});

describe('acceptedSentence', () => {
  it('says which ServedModel will serve which checkpoint', () => {
    expect(acceptedSentence({ deployment_id: 1, checkpoint_id: 14, namespace: 'alpha', name: 'chat' })).toBe(
      'Promotion accepted: ServedModel alpha/chat will serve checkpoint 14; the Deployments page shows its pods roll to it.',
    );
  });
});

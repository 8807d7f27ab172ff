import type { CheckpointBrief, Deployment } from '../api/client';

/** `12 · sft-1 step 200`, or an em dash before any pod serves a checkpoint. */
export function checkpointLabel(checkpoint: CheckpointBrief | null | undefined): string {
  if (!checkpoint) return '—';
  return `${checkpoint.id} · ${checkpoint.run_name} step ${checkpoint.step.toLocaleString('en-US')}`;
}

/** What the deployment is doing about its checkpoint, in a few words: serving what its
 * reference names, rolling to a newer one, or unable to resolve the reference (and why). */
export function rollout(deployment: Deployment): string {
  if (deployment.checkpoint_id === null) return `reference does not resolve: ${deployment.resolve_error ?? 'no reason given'}`;
  if (deployment.serving_checkpoint_id === deployment.checkpoint_id) return 'serving what it names';
  return `wants ${checkpointLabel(deployment.resolved)}`;
}

/** `1 / 2` ready of wanted replicas. */
export function readiness(deployment: Deployment): string {
  return `${deployment.ready_replicas} / ${deployment.replicas}`;
}

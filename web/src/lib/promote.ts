import type { Checkpoint, Deployment, Schemas } from '../api/client';
import { checkpointLabel } from './deployments';

export type PromotionAccepted = Schemas['PromotionAccepted'];

/** The deployments a checkpoint can be promoted to, by name: only a Kubernetes ServedModel
 * is changed through the API (the API refuses the others with a 409). */
export function promotable(deployments: Deployment[]): Deployment[] {
  return deployments.filter((d) => d.backend === 'kubernetes').sort((a, b) => a.name.localeCompare(b.name));
}

/** `chat — serving 12 · sft-1 step 200`, or that it already wants this checkpoint. */
export function deploymentOption(deployment: Deployment, checkpointId: number): string {
  if (deployment.checkpoint_id === checkpointId) return `${deployment.name} — already serves this checkpoint`;
  if (!deployment.serving) return `${deployment.name} — serving nothing yet`;
  return `${deployment.name} — serving ${checkpointLabel(deployment.serving)}`;
}

/** The question asked before a live endpoint changes what it serves: which endpoint, from
 * what to what, and that a reference that followed a run stops following it. */
export function promotionQuestion(deployment: Deployment, checkpoint: Pick<Checkpoint, 'id' | 'step'>, runName: string): string {
  const target = `checkpoint ${checkpoint.id} (${runName} step ${checkpoint.step.toLocaleString('en-US')})`;
  const from = deployment.serving ? `from checkpoint ${checkpointLabel(deployment.serving)} ` : '';
  const follows = deployment.checkpoint.run ? ` It stops following run ${deployment.checkpoint.run}'s ${deployment.checkpoint.checkpoint}.` : '';
  return (
    `Promote ${target} to deployment ${deployment.name} in ${deployment.project}? ` +
    `Its live endpoint moves ${from}to this checkpoint: new pods start beside the old ones, one at a time.` +
    follows
  );
}

/** What the page says once the API accepted the promotion (the pods roll after it). */
export function acceptedSentence(accepted: PromotionAccepted): string {
  return (
    `Promotion accepted: ServedModel ${accepted.namespace}/${accepted.name} will serve checkpoint ${accepted.checkpoint_id}; ` +
    'the Deployments page shows its pods roll to it.'
  );
}

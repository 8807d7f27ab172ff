import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap, type Checkpoint } from '../api/client';
import { useProject } from '../api/queries';
import { acceptedSentence, deploymentOption, promotable, promotionQuestion } from '../lib/promote';
import { href } from '../router';
import { ErrorBox, Loading } from './states';

// A project serves tens of checkpoints, not thousands: one page of its deployments.
const PAGE_SIZE = 200;

/** Promote this checkpoint to one of its project's deployments, through the same API call as
 * `crucible deployments promote`. It changes what a live endpoint serves, so it asks first;
 * what the API refuses (a viewer's token, a checkpoint retention deleted) shows its reason. */
export function PromoteCheckpoint({ checkpoint, runName, projectId }: { checkpoint: Checkpoint; runName: string; projectId: number }) {
  const queryClient = useQueryClient();
  const project = useProject(projectId).data?.name;
  const deployments = useQuery({
    queryKey: ['deployments', project],
    enabled: project !== undefined,
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/deployments', { params: { query: { project, limit: PAGE_SIZE } } })),
  });
  const [chosenId, setChosenId] = useState<number | null>(null);
  const [asking, setAsking] = useState(false);
  const promote = useMutation({
    mutationFn: async (deploymentId: number) =>
      unwrap(
        await api.POST('/api/v1/deployments/{deployment_id}/promote', {
          params: { path: { deployment_id: deploymentId } },
          body: { checkpoint_id: checkpoint.id },
        }),
      ),
    onSuccess: () => void queryClient.invalidateQueries({ queryKey: ['deployments'] }),
    onSettled: () => setAsking(false),
  });

  if (checkpoint.deleted_at) return null; // its files are gone: nothing could serve it
  if (deployments.isPending) return <Loading what="the project's deployments" />;
  if (deployments.isError) return <ErrorBox error={deployments.error} retry={() => void deployments.refetch()} />;
  const choices = promotable(deployments.data.items);
  const chosen = choices.find((d) => d.id === chosenId);
  return (
    <section aria-label="Promote" className="run-actions">
      <h2>Serve it</h2>
      {choices.length === 0 ? (
        <p className="muted">
          No deployment in {project} to promote it to. Apply a <code>ServedModel</code> in the project&apos;s namespace; the operator reports it on
          the <a href={href.deployments()}>Deployments</a> page.
        </p>
      ) : (
        <div className="toolbar">
          <label>
            Deployment
            <select
              value={chosenId ?? ''}
              onChange={(e) => {
                promote.reset();
                setAsking(false);
                setChosenId(e.target.value === '' ? null : Number(e.target.value));
              }}
            >
              <option value="">choose one…</option>
              {choices.map((d) => (
                <option key={d.id} value={d.id}>
                  {deploymentOption(d, checkpoint.id)}
                </option>
              ))}
            </select>
          </label>
          <button
            type="button"
            disabled={chosen === undefined || promote.isPending}
            onClick={() => {
              promote.reset();
              setAsking(true);
            }}
          >
            Promote
          </button>
          {promote.isSuccess && (
            <span role="status" className="muted">
              {acceptedSentence(promote.data)}
            </span>
          )}
        </div>
      )}
      {asking && chosen && (
        <div role="alertdialog" aria-label="Confirm: Promote" className="confirm">
          <p>{promotionQuestion(chosen, checkpoint, runName)}</p>
          <button type="button" onClick={() => promote.mutate(chosen.id)} disabled={promote.isPending}>
            Yes, promote it
          </button>{' '}
          <button type="button" onClick={() => setAsking(false)} disabled={promote.isPending}>
            Keep what it serves
          </button>
        </div>
      )}
      {promote.isError && <ErrorBox error={promote.error} />}
    </section>
  );
}

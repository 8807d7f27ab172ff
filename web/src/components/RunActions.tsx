import { useMutation, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap, type Run } from '../api/client';
import { ErrorBox } from './states';

type Action = 'cancel' | 'preempt';

const ACTIONS: Record<Action, { label: string; confirm: string; yes: string }> = {
  cancel: {
    label: 'Cancel run',
    confirm: 'Cancel this run? Its pods or processes are stopped and it ends Cancelled; it cannot be resumed.',
    yes: 'Yes, cancel it',
  },
  preempt: {
    label: 'Preempt',
    confirm:
      'Preempt the running attempt as a node drain would? The workload is sent SIGTERM, checkpoints and exits, and the next attempt resumes from that checkpoint.',
    yes: 'Yes, preempt it',
  },
};

/** What a user may do to a live run from its page, through the same API calls as the CLI
 * (`crucible runs cancel`, `crucible runs preempt`). Both stop work, so each asks first;
 * what the API refuses (a viewer's token, a run no longer Running) shows its reason. */
export function RunActions({ run }: { run: Run }) {
  const queryClient = useQueryClient();
  const [asking, setAsking] = useState<Action | null>(null);
  const path = { run_id: run.id };
  const act = useMutation({
    mutationFn: async (action: Action) =>
      action === 'cancel'
        ? unwrap(await api.POST('/api/v1/runs/{run_id}/cancel', { params: { path } }))
        : unwrap(await api.POST('/api/v1/runs/{run_id}/preempt', { params: { path } })),
    onSuccess: (updated) => {
      queryClient.setQueryData(['run', run.id], updated);
      void queryClient.invalidateQueries({ queryKey: ['run', run.id] });
    },
    onSettled: () => setAsking(null),
  });
  const available: Action[] = run.phase === 'Running' ? ['cancel', 'preempt'] : ['cancel'];
  return (
    <section aria-label="Run actions" className="run-actions">
      <div className="toolbar">
        {available.map((action) => (
          <button
            key={action}
            type="button"
            disabled={act.isPending}
            onClick={() => {
              act.reset();
              setAsking(action);
            }}
          >
            {ACTIONS[action].label}
          </button>
        ))}
        {act.isSuccess && act.variables === 'preempt' && (
          <span role="status" className="muted">
            Preemption requested: the executor or operator sends the attempt SIGTERM, and the next attempt resumes from its checkpoint.
          </span>
        )}
      </div>
      {asking && (
        <div role="alertdialog" aria-label={`Confirm: ${ACTIONS[asking].label}`} className="confirm">
          <p>{ACTIONS[asking].confirm}</p>
          <button type="button" onClick={() => act.mutate(asking)} disabled={act.isPending}>
            {ACTIONS[asking].yes}
          </button>{' '}
          <button type="button" onClick={() => setAsking(null)} disabled={act.isPending}>
            Keep it running
          </button>
        </div>
      )}
      {act.isError && <ErrorBox error={act.error} />}
    </section>
  );
}

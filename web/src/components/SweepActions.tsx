import { useMutation, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap } from '../api/client';
import type { Sweep } from '../lib/sweeps';
import { ErrorBox } from './states';

/** Cancelling a running sweep, through the same call as `crucible sweeps cancel`. It stops
 * work, so it asks first; what the API refuses (a viewer's token, a sweep already ended)
 * shows its reason. */
export function SweepActions({ sweep }: { sweep: Sweep }) {
  const queryClient = useQueryClient();
  const [asking, setAsking] = useState(false);
  const cancel = useMutation({
    mutationFn: async () =>
      unwrap(await api.POST('/api/v1/sweeps/{sweep_id}/cancel', { params: { path: { sweep_id: sweep.id } } })),
    onSuccess: (updated) => {
      queryClient.setQueryData(['sweep', sweep.id], updated);
      void queryClient.invalidateQueries({ queryKey: ['sweep', sweep.id] });
      void queryClient.invalidateQueries({ queryKey: ['sweeps'] });
    },
    onSettled: () => setAsking(false),
  });
  if (sweep.phase !== 'Running' && !cancel.isError) return null;
  return (
    <section aria-label="Sweep actions" className="run-actions">
      {sweep.phase === 'Running' && (
        <div className="toolbar">
          <button
            type="button"
            disabled={cancel.isPending}
            onClick={() => {
              cancel.reset();
              setAsking(true);
            }}
          >
            Cancel sweep
          </button>
        </div>
      )}
      {asking && (
        <div role="alertdialog" aria-label="Confirm: Cancel sweep" className="confirm">
          <p>
            Cancel this sweep? No more trials start, and its running trials are cancelled; it ends Cancelled and
            cannot be resumed.
          </p>
          <button type="button" onClick={() => cancel.mutate()} disabled={cancel.isPending}>
            Yes, cancel it
          </button>{' '}
          <button type="button" onClick={() => setAsking(false)} disabled={cancel.isPending}>
            Keep it running
          </button>
        </div>
      )}
      {cancel.isError && <ErrorBox error={cancel.error} />}
    </section>
  );
}

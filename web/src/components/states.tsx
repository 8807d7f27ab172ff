import type { ReactNode } from 'react';

import { ApiError } from '../api/client';

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status">
      Loading {what}…
    </p>
  );
}

function hint(error: unknown): string {
  if (error instanceof ApiError) {
    if (error.status === 404) return 'It may have been deleted, or your token cannot see its project.';
    if (error.status === 403) return 'Your token has no access to this; sign in with one that has.';
    if (error.status === 422) return 'The request was refused as malformed; reload the page, and report it if it persists.';
  }
  return 'Check that the control plane is running (crucible up, or crucible server), then try again.';
}

/** What went wrong, what to do about it, and a retry when asking again could help. */
export function ErrorBox({ error, retry }: { error: unknown; retry?: () => void }) {
  const message = error instanceof Error ? error.message : String(error);
  const permanent = error instanceof ApiError && error.status >= 400 && error.status < 500;
  return (
    <div className="error" role="alert">
      <strong>{message}</strong>
      <div>{hint(error)}</div>
      {retry && !permanent && (
        <button type="button" onClick={retry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

import type { ReactNode } from 'react';

import { ApiError } from '../api/client';

export function Loading({ what }: { what: string }) {
  return <p className="muted" role="status">Loading {what}…</p>;
}

export function ErrorBox({ error }: { error: unknown }) {
  const message = error instanceof Error ? error.message : String(error);
  const hint =
    error instanceof ApiError && error.status === 404
      ? 'It may have been deleted, or your token cannot see its project.'
      : error instanceof ApiError && error.status === 403
        ? 'Your token has no access to this; sign in with one that has.'
        : 'Check that the control plane is running, then reload the page.';
  return (
    <div className="error" role="alert">
      <strong>{message}</strong>
      <div>{hint}</div>
    </div>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

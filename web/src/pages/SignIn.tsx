import { useState, type FormEvent } from 'react';
import { useQueryClient } from '@tanstack/react-query';

import { ApiError, api, unwrap } from '../api/client';
import { clearToken, setToken } from '../auth';
import { href, navigate } from '../router';

export function SignIn() {
  const [token, setTokenInput] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [checking, setChecking] = useState(false);
  const queryClient = useQueryClient();

  async function submit(event: FormEvent) {
    event.preventDefault();
    setChecking(true);
    setError(null);
    setToken(token.trim());
    try {
      // Any authenticated call proves the token; listing projects is one every role may make.
      unwrap(await api.GET('/api/v1/projects', { params: { query: { limit: 1 } } }));
      queryClient.clear();
      navigate(href.projects());
    } catch (caught) {
      clearToken();
      setError(
        caught instanceof ApiError && caught.status === 401
          ? 'That token was not accepted: it may be mistyped, revoked or expired.'
          : `Could not reach the control plane: ${caught instanceof Error ? caught.message : String(caught)}`,
      );
    } finally {
      setChecking(false);
    }
  }

  return (
    <main className="signin">
      <h1>Sign in to Crucible</h1>
      <form onSubmit={submit}>
        <label htmlFor="token">API token</label>
        <input
          id="token"
          type="password"
          autoComplete="off"
          placeholder="cru_…"
          value={token}
          onChange={(event) => setTokenInput(event.target.value)}
          required
        />
        <p className="muted">
          <code>crucible server</code> saves an admin token in <code>~/.crucible/token</code>;
          make others with <code>crucible token create</code>. It is kept in this tab only.
        </p>
        <button type="submit" disabled={checking || !token.trim()}>
          {checking ? 'Checking…' : 'Sign in'}
        </button>
        {error && (
          <p className="error" role="alert">
            {error}
          </p>
        )}
      </form>
    </main>
  );
}

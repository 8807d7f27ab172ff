import { useEffect, useState, type FormEvent } from 'react';
import { useQueryClient } from '@tanstack/react-query';

import { ApiError, api, unwrap } from '../api/client';
import { clearToken, setToken } from '../auth';
import { href, navigate } from '../router';

// A code works once. One request per code even when StrictMode runs the effect twice in
// development; a code that was sent is refused here again without asking the server.
const pending = new Map<string, Promise<string>>();
const spent = new Set<string>();
const SPENT =
  'This sign-in link was used already; restart `crucible up` for a new one, or sign in with the token in ~/.crucible/token.';

function redeem(code: string): Promise<string> {
  let session = pending.get(code);
  if (session === undefined) {
    session = api
      .POST('/api/v1/auth/sign-in-code', { body: { code } })
      .then((result) => unwrap(result).token)
      .finally(() => {
        pending.delete(code);
        spent.add(code);
      });
    pending.set(code, session);
  }
  return session;
}

/** The token form, or, with a `code` from the link `crucible up` printed, signing in by it. */
export function SignIn({ code }: { code?: string }) {
  const [token, setTokenInput] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [checking, setChecking] = useState(code !== undefined);
  const [viaLink] = useState(code !== undefined);
  const queryClient = useQueryClient();

  useEffect(() => {
    if (code === undefined) return;
    // Once it is spent, keep the code out of the address bar and the history.
    const forget = () => window.history.replaceState(null, '', `${window.location.pathname}${href.signIn()}`);
    if (spent.has(code)) {
      forget();
      setError(SPENT);
      setChecking(false);
      return;
    }
    let active = true;
    redeem(code)
      .then((session) => {
        if (!active) return;
        forget();
        setToken(session);
        queryClient.clear();
        navigate(href.projects());
      })
      .catch((caught: unknown) => {
        if (!active) return;
        forget();
        setError(
          caught instanceof ApiError
            ? `${caught.message[0]?.toUpperCase() ?? ''}${caught.message.slice(1)}.`
            : `Could not reach the control plane: ${caught instanceof Error ? caught.message : String(caught)}`,
        );
        setChecking(false);
      });
    return () => {
      active = false;
    };
  }, [code, queryClient]);

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
        {viaLink && checking && (
          <p role="status">Signing in with the link from <code>crucible up</code>…</p>
        )}
        <p className="muted">
          <code>crucible up</code> prints a link that signs you in once. <code>crucible server</code> saves an admin token in <code>~/.crucible/token</code>;
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

// The token lives in sessionStorage only: it is gone when the tab closes, never put in a
// URL (so it cannot leak through history or Referer) and never logged.
const KEY = 'crucible.token';

export function getToken(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
}

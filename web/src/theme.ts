import { useSyncExternalStore } from 'react';

// The choice is a display preference, so it may live in localStorage (unlike the token).
const KEY = 'crucible.theme';
export type ThemeChoice = 'system' | 'light' | 'dark';
export type Theme = 'light' | 'dark';

const dark = window.matchMedia('(prefers-color-scheme: dark)');
const listeners = new Set<() => void>();

function choice(): ThemeChoice {
  const stored = localStorage.getItem(KEY);
  return stored === 'light' || stored === 'dark' ? stored : 'system';
}

function resolve(value: ThemeChoice): Theme {
  if (value !== 'system') return value;
  return dark.matches ? 'dark' : 'light';
}

function apply(): void {
  document.documentElement.dataset.theme = resolve(choice());
  for (const listener of listeners) listener();
}

dark.addEventListener('change', apply);
apply();

export function setThemeChoice(value: ThemeChoice): void {
  if (value === 'system') localStorage.removeItem(KEY);
  else localStorage.setItem(KEY, value);
  apply();
}

function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** The theme in effect and what the user picked; re-renders when either changes. */
export function useTheme(): { theme: Theme; choice: ThemeChoice } {
  const current = useSyncExternalStore(subscribe, () => `${resolve(choice())}:${choice()}`);
  const [theme, picked] = current.split(':') as [Theme, ThemeChoice];
  return { theme, choice: picked };
}

/** A CSS custom property's value in the theme in effect, for canvases that cannot use CSS. */
export function cssColor(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

import { useEffect, useState } from 'react';

/** `value` once it has stayed the same for `delayMs`: what a check asked while typing
 * should see, instead of every keystroke. */
export function useDebounced<T>(value: T, delayMs: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = window.setTimeout(() => setSettled(value), delayMs);
    return () => window.clearTimeout(timer);
  }, [value, delayMs]);
  return settled;
}

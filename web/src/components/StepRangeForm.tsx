import { useState, type FormEvent } from 'react';

import { stepWindow, type StepWindow } from '../lib/zoom';

/** Zoom by typing the steps: the keyboard's way to do what a drag across a chart does. */
export function StepRangeForm({ onZoom }: { onZoom: (window: StepWindow) => void }) {
  const [from, setFrom] = useState('');
  const [to, setTo] = useState('');
  const [problem, setProblem] = useState<string | null>(null);

  function submit(event: FormEvent) {
    event.preventDefault();
    const picked = stepWindow(Number(from), Number(to));
    if (from === '' || to === '' || picked === null) {
      setProblem(`Steps ${from || '?'} to ${to || '?'} are not a range: give two steps at least 2 apart.`);
      return;
    }
    setProblem(null);
    onZoom(picked);
  }

  return (
    <form className="step-range" onSubmit={submit} aria-label="Zoom to steps">
      <label>
        From step
        <input type="number" min={0} inputMode="numeric" value={from} onChange={(event) => setFrom(event.target.value)} />
      </label>
      <label>
        to
        <input type="number" min={0} inputMode="numeric" value={to} onChange={(event) => setTo(event.target.value)} />
      </label>
      <button type="submit">Zoom</button>
      {problem && (
        <span className="error-text" role="alert">
          {problem}
        </span>
      )}
    </form>
  );
}

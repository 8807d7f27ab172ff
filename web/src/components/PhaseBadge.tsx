import type { Run } from '../api/client';

export function PhaseBadge({ phase }: { phase: Run['phase'] }) {
  return <span className={`phase phase-${phase}`}>{phase}</span>;
}

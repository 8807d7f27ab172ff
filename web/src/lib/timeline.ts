import type { Attempt } from '../api/client';

/** One attempt as a bar on the run's time axis, positions as fractions of the axis. */
export interface Segment {
  number: number;
  startReason: string;
  endReason: string | null;
  message: string;
  left: number;
  width: number;
  running: boolean;
  /** The attempt ended for a reason other than finishing: a preemption, a lost node, a crash. */
  interrupted: boolean;
}

// The ends the control plane's goodput does not count as lost work (domain/reasons.py).
const GOOD_ENDS = new Set(['Completed', 'CancelledByUser']);

/**
 * Lays the attempts out on one axis from the first start to the last end (or `now` while one
 * still runs); the gaps between bars are the time spent recovering.
 */
export function attemptSegments(attempts: Attempt[], now: number): { segments: Segment[]; start: number; end: number } {
  const spans = attempts
    .map((attempt) => {
      const start = Date.parse(attempt.started_at ?? attempt.created_at);
      const end = attempt.ended_at ? Date.parse(attempt.ended_at) : now;
      return { attempt, start, end: Math.max(start, end) };
    })
    .sort((a, b) => a.attempt.number - b.attempt.number);
  if (spans.length === 0) return { segments: [], start: now, end: now };
  const start = Math.min(...spans.map((span) => span.start));
  const end = Math.max(...spans.map((span) => span.end));
  const total = Math.max(end - start, 1);
  const segments = spans.map(({ attempt, start: from, end: to }) => ({
    number: attempt.number,
    startReason: attempt.start_reason,
    endReason: attempt.end_reason,
    message: attempt.message,
    left: (from - start) / total,
    // Wide enough to see and to hover even when it lasted a blink.
    width: Math.max((to - from) / total, 0.005),
    running: attempt.ended_at === null,
    interrupted: attempt.end_reason !== null && !GOOD_ENDS.has(attempt.end_reason),
  }));
  return { segments, start, end };
}

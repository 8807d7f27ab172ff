import { describe, expect, it } from 'vitest';

import type { Attempt } from '../api/client';
import { attemptSegments } from './timeline';

function attempt(number: number, start: string, end: string | null, endReason: string | null): Attempt {
  return {
    id: number,
    run_id: 1,
    number,
    start_reason: number === 1 ? 'initial' : 'preemption',
    resumed_from_checkpoint_id: null,
    end_reason: endReason,
    exit_code: null,
    message: '',
    created_at: start,
    started_at: start,
    ended_at: end,
    heartbeat_at: null,
    image: null,
    image_id: null,
    packages: null,
  };
}

describe('attemptSegments', () => {
  it('places attempts on one axis with the recovery gap between them', () => {
    const { segments } = attemptSegments(
      [
        attempt(2, '2026-01-01T00:01:00Z', null, null),
        attempt(1, '2026-01-01T00:00:00Z', '2026-01-01T00:00:40Z', 'Preempted'),
      ],
      Date.parse('2026-01-01T00:02:00Z'),
    );
    expect(segments.map((s) => s.number)).toEqual([1, 2]);
    const [first, second] = segments;
    expect(first).toMatchObject({ left: 0, interrupted: true, running: false });
    expect(first?.width).toBeCloseTo(1 / 3);
    expect(second).toMatchObject({ left: 0.5, width: 0.5, running: true, interrupted: false });
  });

  it('does not call a completed or user-cancelled attempt an interruption', () => {
    const { segments } = attemptSegments(
      [
        attempt(1, '2026-01-01T00:00:00Z', '2026-01-01T00:00:10Z', 'Completed'),
        attempt(2, '2026-01-01T00:00:10Z', '2026-01-01T00:00:20Z', 'CancelledByUser'),
      ],
      Date.now(),
    );
    expect(segments.every((s) => !s.interrupted)).toBe(true);
  });

  it('keeps an instant attempt visible', () => {
    const { segments } = attemptSegments(
      [
        attempt(1, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 'ErrorExit'),
        attempt(2, '2026-01-01T00:00:00Z', '2026-01-01T01:00:00Z', 'Completed'),
      ],
      Date.now(),
    );
    expect(segments[0]?.width).toBeGreaterThan(0);
  });
});

import { describe, expect, it } from 'vitest';

import type { MetricSeries } from '../api/client';
import { resolutionNote, stepWindow } from './zoom';

describe('stepWindow', () => {
  it('widens a drag to whole steps, in either direction', () => {
    expect(stepWindow(10.4, 99.2)).toEqual({ stepMin: 10, stepMax: 100 });
    expect(stepWindow(99.2, 10.4)).toEqual({ stepMin: 10, stepMax: 100 });
  });

  it('ignores a click-sized drag and clamps below step 0', () => {
    expect(stepWindow(5.1, 5.9)).toBeNull();
    expect(stepWindow(-20, 4)).toEqual({ stepMin: 0, stepMax: 4 });
    expect(stepWindow(Number.NaN, 4)).toBeNull();
  });
});

describe('resolutionNote', () => {
  const series = (shown: number, total: number, downsampled: boolean): MetricSeries => ({
    key: 'loss',
    steps: Array.from({ length: shown }, (_, i) => i),
    values: Array.from({ length: shown }, () => 1),
    times: Array.from({ length: shown }, () => 0),
    total_points: total,
    downsampled,
  });

  it('says when the server cut the series down', () => {
    expect(resolutionNote(series(2000, 1_000_000, true))).toBe('2,000 of 1,000,000 points');
    expect(resolutionNote(series(600, 600, false))).toBe('600 points');
  });
});

import { describe, expect, it } from 'vitest';

import { age, bytes, duration, orDash, percent, score, tickLabel } from './format';

describe('age', () => {
  const now = Date.parse('2026-01-10T12:00:00Z');

  it('uses the largest whole unit', () => {
    expect(age('2026-01-10T11:59:20Z', now)).toBe('40s');
    expect(age('2026-01-10T11:48:00Z', now)).toBe('12m');
    expect(age('2026-01-10T07:00:00Z', now)).toBe('5h');
    expect(age('2026-01-07T12:00:00Z', now)).toBe('3d');
  });

  it('never goes negative when the clocks disagree', () => {
    expect(age('2026-01-10T12:00:05Z', now)).toBe('0s');
  });
});

describe('orDash', () => {
  it('shows a dash for missing values but keeps zero', () => {
    expect(orDash(null)).toBe('—');
    expect(orDash(undefined)).toBe('—');
    expect(orDash(0)).toBe('0');
  });
});

describe('duration', () => {
  it('picks units a person reads at a glance', () => {
    expect(duration(12.4)).toBe('12s');
    expect(duration(245)).toBe('4m 05s');
    expect(duration(3720)).toBe('1h 02m');
    expect(duration(-3)).toBe('0s');
  });
});

describe('percent, bytes and score', () => {
  it('formats with a dash for unknown values', () => {
    expect(percent(0.8734)).toBe('87.3%');
    expect(percent(null)).toBe('—');
    expect(bytes(999)).toBe('999 B');
    expect(bytes(1_234_567)).toBe('1.2 MB');
    expect(score(0.798123)).toBe('0.7981');
    expect(score(undefined)).toBe('—');
  });
});

describe('tickLabel', () => {
  it('keeps every magnitude a few characters wide', () => {
    expect(tickLabel(0)).toBe('0');
    expect(tickLabel(8.05e13)).toBe('80.5T');
    expect(tickLabel(1500)).toBe('1.5k');
    expect(tickLabel(-2.5e6)).toBe('-2.5M');
    expect(tickLabel(0.25)).toBe('0.25');
    expect(tickLabel(3e-4)).toBe('3e-4');
    expect(tickLabel(1.25e-5)).toBe('1.3e-5');
    expect(tickLabel(42.123)).toBe('42.1');
  });
});

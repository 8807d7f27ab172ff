import { describe, expect, it } from 'vitest';

import { age, orDash } from './format';

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

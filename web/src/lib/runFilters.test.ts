import { describe, expect, it } from 'vitest';

import {
  ariaSort,
  DEFAULT_FILTERS,
  filtersFromSearch,
  filtersToSearch,
  runsQuery,
  toggleSelected,
  toggleSort,
} from './runFilters';
import { needsMore, visibleRows } from './virtual';

describe('runsQuery', () => {
  it('sends only the filters that are set', () => {
    expect(runsQuery(4, DEFAULT_FILTERS)).toEqual({ experiment_id: 4, sort: 'created_at', descending: true });
    expect(runsQuery(4, { ...DEFAULT_FILTERS, phase: 'Failed', kind: 'eval' })).toEqual({
      experiment_id: 4,
      sort: 'created_at',
      descending: true,
      phase: 'Failed',
      kind: 'eval',
    });
  });
});

describe('toggleSort', () => {
  it('flips the order of the current column and starts names A to Z', () => {
    const flipped = toggleSort(DEFAULT_FILTERS, 'created_at');
    expect(flipped).toMatchObject({ sort: 'created_at', descending: false });
    const byName = toggleSort(flipped, 'name');
    expect(byName).toMatchObject({ sort: 'name', descending: false });
    expect(ariaSort(byName, 'name')).toBe('ascending');
    expect(ariaSort(byName, 'phase')).toBe('none');
  });
});

describe('toggleSelected', () => {
  it('adds, removes and caps the selection, dropping the oldest pick', () => {
    expect(toggleSelected([1, 2], 3)).toEqual([1, 2, 3]);
    expect(toggleSelected([1, 2, 3], 2)).toEqual([1, 3]);
    expect(toggleSelected([1, 2], 3, 2)).toEqual([2, 3]);
  });
});

describe('visibleRows', () => {
  it('renders the rows in view plus the overscan, within the loaded count', () => {
    expect(visibleRows(0, 360, 36, 10_000, 5)).toEqual({ start: 0, end: 15 });
    expect(visibleRows(36_000, 360, 36, 10_000, 5)).toEqual({ start: 995, end: 1015 });
    expect(visibleRows(36_000, 360, 36, 1_003, 5)).toEqual({ start: 995, end: 1003 });
  });

  it('asks for the next page only near the end of what is loaded', () => {
    expect(needsMore(30, 100)).toBe(false);
    expect(needsMore(85, 100)).toBe(true);
  });
});

describe('filters in the link', () => {
  it('round-trips and leaves the defaults out', () => {
    expect(filtersToSearch(DEFAULT_FILTERS)).toBe('');
    const picked = { phase: 'Failed', kind: 'eval', sort: 'name', descending: true } as const;
    expect(filtersToSearch(picked)).toBe('phase=Failed&kind=eval&sort=name&order=desc');
    expect(filtersFromSearch(filtersToSearch(picked))).toEqual(picked);
    expect(filtersFromSearch('sort=name')).toEqual({ ...DEFAULT_FILTERS, sort: 'name', descending: false });
  });

  it('ignores values it does not know', () => {
    expect(filtersFromSearch('phase=Exploded&kind=x&sort=gpus&order=up')).toEqual(DEFAULT_FILTERS);
  });
});

import { describe, expect, it } from 'vitest';

import { href, parseRoute } from './router';

describe('parseRoute', () => {
  it('reads each page and its id from the hash', () => {
    expect(parseRoute('')).toEqual({ page: 'projects' });
    expect(parseRoute('#/')).toEqual({ page: 'projects' });
    expect(parseRoute('#/signin')).toEqual({ page: 'signin' });
    expect(parseRoute('#/projects/3')).toEqual({ page: 'project', id: 3 });
    expect(parseRoute('#/experiments/12')).toEqual({ page: 'experiment', id: 12 });
    expect(parseRoute('#/runs/7')).toEqual({ page: 'run', id: 7 });
  });

  it('round-trips the links it builds', () => {
    expect(parseRoute(href.run(42))).toEqual({ page: 'run', id: 42 });
    expect(parseRoute(href.experiment(5))).toEqual({ page: 'experiment', id: 5 });
  });

  it('names an unknown or malformed path instead of guessing', () => {
    expect(parseRoute('#/runs/abc')).toEqual({ page: 'notFound', path: '/runs/abc' });
    expect(parseRoute('#/runs/7/extra')).toEqual({ page: 'notFound', path: '/runs/7/extra' });
  });
});

import { describe, expect, it } from 'vitest';

import { href, parseRoute } from './router';

describe('parseRoute', () => {
  it('reads each page and its id from the hash', () => {
    expect(parseRoute('')).toEqual({ page: 'projects' });
    expect(parseRoute('#/')).toEqual({ page: 'projects' });
    expect(parseRoute('#/signin')).toEqual({ page: 'signin' });
    expect(parseRoute('#/signin?code=a-B_9')).toEqual({ page: 'signin', code: 'a-B_9' });
    expect(parseRoute('#/projects/3')).toEqual({ page: 'project', id: 3 });
    expect(parseRoute('#/experiments/12')).toEqual({ page: 'experiment', id: 12, search: '' });
    expect(parseRoute('#/experiments/12?kind=eval')).toEqual({ page: 'experiment', id: 12, search: 'kind=eval' });
    expect(parseRoute('#/runs/7')).toEqual({ page: 'run', id: 7 });
    expect(parseRoute('#/runs/7/profiles/rank0-steps101-103')).toEqual({
      page: 'profileTrace',
      runId: 7,
      name: 'rank0-steps101-103',
    });
    expect(parseRoute('#/checkpoints/9')).toEqual({ page: 'checkpoint', id: 9 });
    expect(parseRoute('#/sweeps/4')).toEqual({ page: 'sweep', id: 4 });
    expect(parseRoute('#/lineage/dataset_version/4')).toEqual({
      page: 'lineage',
      node: { type: 'dataset_version', id: 4 },
    });
    expect(parseRoute('#/compare?runs=3,5,3')).toEqual({ page: 'compare', runs: [3, 5] });
    expect(parseRoute('#/cluster')).toEqual({ page: 'cluster' });
    expect(parseRoute('#/deployments')).toEqual({ page: 'deployments' });
  });

  it('round-trips the links it builds', () => {
    expect(parseRoute(href.run(42))).toEqual({ page: 'run', id: 42 });
    expect(parseRoute(href.profileTrace(42, 'rank1-steps3-4'))).toEqual({ page: 'profileTrace', runId: 42, name: 'rank1-steps3-4' });
    expect(parseRoute(href.cluster())).toEqual({ page: 'cluster' });
    expect(parseRoute(href.deployments())).toEqual({ page: 'deployments' });
    expect(parseRoute(href.experiment(5))).toEqual({ page: 'experiment', id: 5, search: '' });
    expect(parseRoute(href.experiment(5, 'sort=name'))).toEqual({ page: 'experiment', id: 5, search: 'sort=name' });
    expect(parseRoute(href.checkpoint(8))).toEqual({ page: 'checkpoint', id: 8 });
    expect(parseRoute(href.sweep(6))).toEqual({ page: 'sweep', id: 6 });
    expect(parseRoute(href.lineage('eval_result', 2))).toEqual({
      page: 'lineage',
      node: { type: 'eval_result', id: 2 },
    });
    expect(parseRoute(href.compare([1, 2]))).toEqual({ page: 'compare', runs: [1, 2] });
  });

  it('names an unknown or malformed path instead of guessing', () => {
    expect(parseRoute('#/runs/abc')).toEqual({ page: 'notFound', path: '/runs/abc' });
    expect(parseRoute('#/runs/7/extra')).toEqual({ page: 'notFound', path: '/runs/7/extra' });
    expect(parseRoute('#/lineage/model/1')).toEqual({ page: 'notFound', path: '/lineage/model/1' });
    expect(parseRoute('#/compare?runs=1,x')).toEqual({ page: 'notFound', path: '/compare?runs=1,x' });
    expect(parseRoute('#/compare')).toEqual({ page: 'notFound', path: '/compare' });
    expect(parseRoute('#/sweeps/lr')).toEqual({ page: 'notFound', path: '/sweeps/lr' });
    expect(parseRoute('#/runs/7/profiles/..%2F..%2Fsecret')).toEqual({ page: 'notFound', path: '/runs/7/profiles/..%2F..%2Fsecret' });
    expect(parseRoute('#/runs/7/profiles/rank0-steps1')).toEqual({ page: 'notFound', path: '/runs/7/profiles/rank0-steps1' });
  });
});

describe('the submit page', () => {
  it('reads what the editor starts from, and round-trips its links', () => {
    expect(parseRoute('#/projects/3/submit')).toEqual({ page: 'submit', projectId: 3, start: { from: 'run' } });
    expect(parseRoute('#/projects/3/submit?template=sweep')).toEqual({
      page: 'submit',
      projectId: 3,
      start: { from: 'sweep' },
    });
    expect(parseRoute('#/projects/3/submit?reproduce=12')).toEqual({
      page: 'submit',
      projectId: 3,
      start: { from: 'reproduce', runId: 12 },
    });
    for (const start of [{ from: 'run' }, { from: 'sweep' }, { from: 'resubmit', runId: 7 }, { from: 'reproduce', runId: 8 }] as const) {
      expect(parseRoute(href.submit(4, start))).toEqual({ page: 'submit', projectId: 4, start });
    }
  });

  it('sends an unknown start to the not-found page', () => {
    expect(parseRoute('#/projects/3/submit?resubmit=x')).toEqual({ page: 'notFound', path: '/projects/3/submit?resubmit=x' });
    expect(parseRoute('#/projects/3/submit?template=eval').page).toBe('notFound');
  });
});

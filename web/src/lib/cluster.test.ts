import { describe, expect, it } from 'vitest';

import type { ClusterNode } from '../api/client';
import { filterNodes, summarize, usage } from './cluster';

function node(name: string, allocated: number, extra: Partial<ClusterNode> = {}): ClusterNode {
  return { name, ready: true, schedulable: true, gpus_allocatable: 8, gpus_allocated: allocated, gpu_product: 'NVIDIA-H200', ...extra };
}

const nodes = [
  node('gpu-a1', 8),
  node('gpu-a2', 3),
  node('gpu-b1', 0),
  node('gpu-b2', 0, { ready: false }),
  node('gpu-b3', 0, { schedulable: false }),
];

describe('summarize', () => {
  it('counts GPUs and sorts ready nodes by how full they are', () => {
    expect(summarize(nodes)).toEqual({ nodes: 5, notReady: 1, gpus: 40, gpusAllocated: 11, full: 1, partial: 1, idle: 2 });
  });
  it('is all zeros for no nodes', () => {
    expect(summarize([])).toEqual({ nodes: 0, notReady: 0, gpus: 0, gpusAllocated: 0, full: 0, partial: 0, idle: 0 });
  });
});

describe('filterNodes', () => {
  const names = (list: ClusterNode[]) => list.map((n) => n.name);
  it('matches names case-insensitively', () => {
    expect(names(filterNodes(nodes, ' B1 ', 'all'))).toEqual(['gpu-b1']);
  });
  it('busy: nodes running something', () => {
    expect(names(filterNodes(nodes, '', 'busy'))).toEqual(['gpu-a1', 'gpu-a2']);
  });
  it('free: ready, schedulable, with a GPU left', () => {
    expect(names(filterNodes(nodes, '', 'free'))).toEqual(['gpu-a2', 'gpu-b1']);
  });
  it('notReady and the text filter combine', () => {
    expect(names(filterNodes(nodes, 'a', 'notReady'))).toEqual([]);
    expect(names(filterNodes(nodes, 'b', 'notReady'))).toEqual(['gpu-b2']);
  });
});

describe('usage', () => {
  it('is the share in use, capped at 1, and 0 without GPUs', () => {
    expect(usage(node('x', 2))).toBe(0.25);
    expect(usage(node('x', 9))).toBe(1);
    expect(usage(node('x', 0, { gpus_allocatable: 0 }))).toBe(0);
  });
});

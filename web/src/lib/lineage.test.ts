import { describe, expect, it } from 'vitest';

import type { LineageGraph, LineageNode, LineageNodeType } from '../api/client';
import { checkpointNeighbours, layoutGraph, layoutInput } from './lineage';

function node(type: LineageNodeType, id: number, depth: number, data: Record<string, unknown> = {}): LineageNode {
  return { type, id, depth, label: `${type} ${id}`, data };
}

function edge(source: [LineageNodeType, number], target: [LineageNodeType, number], relation: 'produced' | 'consumed_by' | 'initialised' | 'scored_by') {
  return { source: { type: source[0], id: source[1] }, target: { type: target[0], id: target[1] }, relation };
}

// dataset -> sft run -> checkpoint 5 -> eval; checkpoint 5 -> rl run (initialised)
const graph: LineageGraph = {
  root: { type: 'checkpoint', id: 5 },
  truncated: false,
  nodes: [
    node('checkpoint', 5, 0),
    node('run', 1, 1, { kind: 'train' }),
    node('dataset_version', 3, 2),
    node('eval_result', 9, 1),
    node('run', 2, 1, { kind: 'train' }),
    node('run', 1, 1, { kind: 'train' }),
  ],
  edges: [
    edge(['dataset_version', 3], ['run', 1], 'consumed_by'),
    edge(['run', 1], ['checkpoint', 5], 'produced'),
    edge(['run', 1], ['checkpoint', 5], 'produced'),
    edge(['checkpoint', 5], ['eval_result', 9], 'scored_by'),
    edge(['checkpoint', 5], ['run', 2], 'initialised'),
    edge(['checkpoint', 5], ['run', 77], 'initialised'),
  ],
};

describe('layoutInput', () => {
  it('keeps each node and edge once and drops edges to nodes outside the walk', () => {
    const { nodes, edges } = layoutInput(graph);
    expect(nodes).toHaveLength(5);
    expect(edges.map((e) => e.key)).toEqual([
      'dataset_version:3->run:1:consumed_by',
      'run:1->checkpoint:5:produced',
      'checkpoint:5->eval_result:9:scored_by',
      'checkpoint:5->run:2:initialised',
    ]);
  });
});

describe('layoutGraph', () => {
  it('lays data flow out left to right and marks the root', () => {
    const { nodes } = layoutGraph(graph);
    const at = (key: string) => nodes.find((n) => n.key === key);
    const x = (key: string) => at(key)?.x ?? Number.NaN;
    expect(x('dataset_version:3')).toBeLessThan(x('run:1'));
    expect(x('run:1')).toBeLessThan(x('checkpoint:5'));
    expect(x('checkpoint:5')).toBeLessThan(x('eval_result:9'));
    expect(x('checkpoint:5')).toBeLessThan(x('run:2'));
    expect(at('checkpoint:5')?.root).toBe(true);
    expect(nodes.filter((n) => n.root)).toHaveLength(1);
  });
});

describe('checkpointNeighbours', () => {
  it('sorts the neighbours into producer, inputs and what was made from it', () => {
    const upstream: LineageGraph = {
      ...graph,
      nodes: [node('checkpoint', 5, 0), node('run', 1, 1), node('dataset_version', 3, 2), node('checkpoint', 4, 2)],
    };
    const downstream: LineageGraph = {
      ...graph,
      nodes: [node('checkpoint', 5, 0), node('eval_result', 9, 1), node('run', 2, 1, { kind: 'rollout' }), node('run', 6, 1, { kind: 'train' })],
    };
    const sorted = checkpointNeighbours(upstream, downstream);
    expect(sorted.producer?.id).toBe(1);
    expect(sorted.datasets.map((n) => n.id)).toEqual([3]);
    expect(sorted.parents.map((n) => n.id)).toEqual([4]);
    expect(sorted.evals.map((n) => n.id)).toEqual([9]);
    expect(sorted.rollouts.map((n) => n.id)).toEqual([2]);
    expect(sorted.runs.map((n) => n.id)).toEqual([6]);
  });
});

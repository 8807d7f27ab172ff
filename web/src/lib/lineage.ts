import dagre from '@dagrejs/dagre';

import type { LineageEdge, LineageGraph, LineageNode, LineageNodeType } from '../api/client';
import { href } from '../router';

export const NODE_WIDTH = 210;
export const NODE_HEIGHT = 58;

export function nodeKey(ref: { type: LineageNodeType; id: number }): string {
  return `${ref.type}:${ref.id}`;
}

export interface LayoutNode extends LineageNode {
  key: string;
  root: boolean;
  x: number;
  y: number;
}

export interface LayoutEdge extends LineageEdge {
  key: string;
  sourceKey: string;
  targetKey: string;
}

/**
 * What dagre is given: every node once, and only edges whose ends are both in the graph (the
 * walk stops at `depth`, and an edge can outlive a deleted run).
 */
export function layoutInput(graph: LineageGraph): { nodes: LineageNode[]; edges: LayoutEdge[] } {
  const nodes = new Map<string, LineageNode>();
  for (const node of graph.nodes) nodes.set(nodeKey(node), node);
  const edges = new Map<string, LayoutEdge>();
  for (const edge of graph.edges) {
    const sourceKey = nodeKey(edge.source);
    const targetKey = nodeKey(edge.target);
    if (!nodes.has(sourceKey) || !nodes.has(targetKey)) continue;
    const key = `${sourceKey}->${targetKey}:${edge.relation}`;
    edges.set(key, { ...edge, key, sourceKey, targetKey });
  }
  return { nodes: [...nodes.values()], edges: [...edges.values()] };
}

/** Positions left to right in the direction data flows: inputs on the left, results right. */
export function layoutGraph(graph: LineageGraph): { nodes: LayoutNode[]; edges: LayoutEdge[] } {
  const { nodes, edges } = layoutInput(graph);
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'LR', nodesep: 24, ranksep: 72, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  // Sorted so the same graph always gets the same picture, whatever order the API sent.
  const sorted = [...nodes].sort((a, b) => nodeKey(a).localeCompare(nodeKey(b)));
  for (const node of sorted) g.setNode(nodeKey(node), { width: NODE_WIDTH, height: NODE_HEIGHT });
  for (const edge of edges) g.setEdge(edge.sourceKey, edge.targetKey);
  dagre.layout(g);
  const rootKey = nodeKey(graph.root);
  return {
    nodes: sorted.map((node) => {
      const key = nodeKey(node);
      const { x, y } = g.node(key);
      // dagre gives centres; React Flow places nodes by their top-left corner.
      return { ...node, key, root: key === rootKey, x: x - NODE_WIDTH / 2, y: y - NODE_HEIGHT / 2 };
    }),
    edges,
  };
}

/** A checkpoint's neighbours sorted into what the checkpoint page shows. */
export function checkpointNeighbours(upstream: LineageGraph | undefined, downstream: LineageGraph | undefined) {
  const up = upstream?.nodes.filter((node) => node.depth > 0) ?? [];
  const down = downstream?.nodes.filter((node) => node.depth === 1) ?? [];
  return {
    producer: up.find((node) => node.type === 'run' && node.depth === 1),
    datasets: up.filter((node) => node.type === 'dataset_version'),
    parents: up.filter((node) => node.type === 'checkpoint'),
    evals: down.filter((node) => node.type === 'eval_result'),
    rollouts: down.filter((node) => node.type === 'run' && node.data.kind === 'rollout'),
    runs: down.filter((node) => node.type === 'run' && node.data.kind !== 'rollout'),
  };
}

export const NODE_TYPE_LABEL: Record<LineageNodeType, string> = {
  dataset_version: 'dataset',
  run: 'run',
  checkpoint: 'checkpoint',
  eval_result: 'eval',
  artifact: 'artifact',
};

/** The page an entity has of its own, if any (a dataset version has only its lineage). */
export function entityHref(node: { type: LineageNodeType; id: number; data?: Record<string, unknown> }): string | null {
  if (node.type === 'run') return href.run(node.id);
  if (node.type === 'checkpoint') return href.checkpoint(node.id);
  if (node.type === 'eval_result' && typeof node.data?.checkpoint_id === 'number') return href.checkpoint(node.data.checkpoint_id);
  return null;
}

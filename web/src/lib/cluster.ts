import type { ClusterNode } from '../api/client';

export interface ClusterSummary {
  nodes: number;
  notReady: number;
  gpus: number;
  gpusAllocated: number;
  /** Ready nodes by how much of their GPUs are in use. */
  full: number;
  partial: number;
  idle: number;
}

export function summarize(nodes: ClusterNode[]): ClusterSummary {
  const summary: ClusterSummary = { nodes: nodes.length, notReady: 0, gpus: 0, gpusAllocated: 0, full: 0, partial: 0, idle: 0 };
  for (const node of nodes) {
    summary.gpus += node.gpus_allocatable;
    summary.gpusAllocated += node.gpus_allocated;
    if (!node.ready) summary.notReady += 1;
    else if (node.gpus_allocated === 0) summary.idle += 1;
    else if (node.gpus_allocated >= node.gpus_allocatable) summary.full += 1;
    else summary.partial += 1;
  }
  return summary;
}

export type NodeFilter = 'all' | 'busy' | 'free' | 'notReady';

/** Nodes whose name contains `text` (case-insensitive) and that match `show`: busy ones run
 * something, free ones are ready with a GPU left, notReady ones cannot take work. */
export function filterNodes(nodes: ClusterNode[], text: string, show: NodeFilter): ClusterNode[] {
  const needle = text.trim().toLowerCase();
  return nodes.filter((node) => {
    if (needle && !node.name.toLowerCase().includes(needle)) return false;
    if (show === 'busy') return node.gpus_allocated > 0;
    if (show === 'free') return node.ready && node.schedulable && node.gpus_allocated < node.gpus_allocatable;
    if (show === 'notReady') return !node.ready;
    return true;
  });
}

/** The share of a node's GPUs in use, 0 to 1 (a node without GPUs counts as empty). */
export function usage(node: ClusterNode): number {
  return node.gpus_allocatable > 0 ? Math.min(1, node.gpus_allocated / node.gpus_allocatable) : 0;
}

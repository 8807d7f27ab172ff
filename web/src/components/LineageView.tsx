import {
  Background,
  Controls,
  Handle,
  MarkerType,
  Position,
  ReactFlow,
  type Edge,
  type Node,
  type NodeProps,
} from '@xyflow/react';
import '@xyflow/react/dist/style.css';
import { useMemo } from 'react';

import type { LineageGraph, LineageNodeType } from '../api/client';
import { layoutGraph, NODE_HEIGHT, NODE_TYPE_LABEL, NODE_WIDTH, type LayoutNode } from '../lib/lineage';
import { useTheme } from '../theme';

type EntityNode = Node<{ entity: LayoutNode }, 'entity'>;

function Entity({ data }: NodeProps<EntityNode>) {
  const { entity } = data;
  return (
    <div
      className={`entity entity-${entity.type}${entity.root ? ' entity-root' : ''}`}
      style={{ width: NODE_WIDTH, height: NODE_HEIGHT }}
      title={`${NODE_TYPE_LABEL[entity.type]} ${entity.id}: ${entity.label}`}
    >
      <Handle type="target" position={Position.Left} isConnectable={false} />
      <span className="entity-type">
        {NODE_TYPE_LABEL[entity.type]} {entity.id}
        {typeof entity.data.phase === 'string' && ` · ${entity.data.phase}`}
      </span>
      <span className="entity-label">{entity.label}</span>
      <Handle type="source" position={Position.Right} isConnectable={false} />
    </div>
  );
}

const nodeTypes = { entity: Entity };

/**
 * The lineage graph laid out by dagre and drawn by React Flow; clicking a node calls `onOpen`
 * with it, which the explorer uses to re-centre the graph there. `stale` marks a graph that is
 * still the previous node's while the new one loads (dimmed, `aria-busy`): what it shows is about
 * to be replaced.
 */
export function LineageView({
  graph,
  onOpen,
  height = 520,
  stale = false,
}: {
  graph: LineageGraph;
  onOpen: (node: { type: LineageNodeType; id: number }) => void;
  height?: number;
  stale?: boolean;
}) {
  const { theme } = useTheme();
  const { nodes, edges } = useMemo(() => {
    const layout = layoutGraph(graph);
    return {
      nodes: layout.nodes.map<EntityNode>((entity) => ({
        id: entity.key,
        type: 'entity',
        position: { x: entity.x, y: entity.y },
        data: { entity },
        draggable: false,
        connectable: false,
        ariaLabel: `${NODE_TYPE_LABEL[entity.type]} ${entity.label}`,
      })),
      edges: layout.edges.map<Edge>((edge) => ({
        id: edge.key,
        source: edge.sourceKey,
        target: edge.targetKey,
        label: edge.relation.replace('_', ' '),
        markerEnd: { type: MarkerType.ArrowClosed },
        focusable: false,
      })),
    };
  }, [graph]);

  return (
    <div
      className={`lineage-canvas${stale ? ' stale' : ''}`}
      style={{ height }}
      data-testid="lineage-graph"
      aria-busy={stale}
      // React Flow makes nodes focusable (Tab) but does nothing on Enter; open the focused one.
      onKeyDown={(event) => {
        if (event.key !== 'Enter') return;
        const key = (event.target as HTMLElement).closest<HTMLElement>('.react-flow__node')?.dataset.id;
        const entity = nodes.find((node) => node.id === key)?.data.entity;
        if (entity) onOpen({ type: entity.type, id: entity.id });
      }}
    >
      <ReactFlow
        nodes={nodes}
        edges={edges}
        nodeTypes={nodeTypes}
        colorMode={theme}
        fitView
        minZoom={0.1}
        nodesConnectable={false}
        nodesDraggable={false}
        onNodeClick={(_, node: EntityNode) => onOpen({ type: node.data.entity.type, id: node.data.entity.id })}
      >
        <Background />
        <Controls showInteractive={false} />
      </ReactFlow>
    </div>
  );
}

import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap, type LineageNode, type LineageNodeType, type Schemas } from '../api/client';
import { LineageView } from '../components/LineageView';
import { Empty, ErrorBox, Loading } from '../components/states';
import { entityHref, NODE_TYPE_LABEL, nodeKey } from '../lib/lineage';
import { href, navigate } from '../router';

type Direction = Schemas['LineageDirection'];
const DEPTHS = [1, 2, 3, 5, 8, 10];

export function Lineage({ node }: { node: { type: LineageNodeType; id: number } }) {
  const [direction, setDirection] = useState<Direction>('both');
  const [depth, setDepth] = useState(3);
  const graph = useQuery({
    queryKey: ['lineage', node.type, node.id, direction, depth],
    placeholderData: keepPreviousData,
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/lineage/{entity}/{entity_id}', {
          params: { path: { entity: node.type, entity_id: node.id }, query: { direction, depth } },
        }),
      ),
  });
  const root = graph.data?.nodes.find((n) => n.type === node.type && n.id === node.id);
  const page = root ? entityHref(root) : null;
  const neighbours = graph.data?.nodes.filter((n) => n.depth > 0) ?? [];

  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / lineage
      </nav>
      <h1>
        Lineage of {NODE_TYPE_LABEL[node.type]} {root?.label ?? node.id}
      </h1>
      <div className="toolbar">
        <label>
          Direction
          <select value={direction} onChange={(event) => setDirection(event.target.value as Direction)}>
            <option value="both">both</option>
            <option value="upstream">upstream (what it was made from)</option>
            <option value="downstream">downstream (what was made from it)</option>
          </select>
        </label>
        <label>
          Depth
          <select value={depth} onChange={(event) => setDepth(Number(event.target.value))}>
            {DEPTHS.map((d) => (
              <option key={d} value={d}>
                {d} {d === 1 ? 'hop' : 'hops'}
              </option>
            ))}
          </select>
        </label>
        {page && <a href={page}>Open this {NODE_TYPE_LABEL[node.type]}&apos;s page</a>}
        <span className="muted">Click a node to centre the graph on it.</span>
      </div>
      {graph.isPending && <Loading what="the lineage graph" />}
      {graph.isError && <ErrorBox error={graph.error} retry={() => void graph.refetch()} />}
      {graph.data?.truncated && (
        <p className="error" role="alert">
          The graph has more than 5,000 nodes at this depth and was cut short; pick fewer hops.
        </p>
      )}
      {graph.data && neighbours.length === 0 && (
        <Empty>
          Nothing is linked to this {NODE_TYPE_LABEL[node.type]} {direction === 'both' ? '' : `${direction} `}yet. Runs link their inputs
          (datasets, a starting checkpoint) when they resolve them, and checkpoints and evals as they are recorded.
        </Empty>
      )}
      {graph.data && neighbours.length > 0 && (
        <>
          <LineageView graph={graph.data} stale={graph.isPlaceholderData} onOpen={(next) => navigate(href.lineage(next.type, next.id))} />
          <h2>Nodes</h2>
          <NodeList nodes={graph.data.nodes} />
        </>
      )}
    </>
  );
}

/** The same nodes as links, by distance: the keyboard's and screen reader's way through. */
function NodeList({ nodes }: { nodes: LineageNode[] }) {
  const sorted = [...nodes].sort((a, b) => a.depth - b.depth || nodeKey(a).localeCompare(nodeKey(b)));
  return (
    <ul className="node-list" aria-label="Lineage nodes">
      {sorted.map((n) => (
        <li key={nodeKey(n)}>
          <span className={`entity-chip entity-${n.type}`}>{NODE_TYPE_LABEL[n.type]}</span>
          <a href={href.lineage(n.type, n.id)}>{n.label}</a>
          <span className="muted small">{n.depth === 0 ? 'here' : `${n.depth} ${n.depth === 1 ? 'hop' : 'hops'} away`}</span>
          {typeof n.data.digest === 'string' && <code className="small">{n.data.digest.slice(0, 23)}…</code>}
        </li>
      ))}
    </ul>
  );
}

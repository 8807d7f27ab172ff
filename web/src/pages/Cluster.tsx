import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap, type ClusterNode } from '../api/client';
import { PhaseBadge } from '../components/PhaseBadge';
import { Empty, ErrorBox, Loading } from '../components/states';
import { age } from '../format';
import { filterNodes, summarize, usage, type NodeFilter } from '../lib/cluster';
import { href } from '../router';

// Rows drawn at once; a 1,000-node cluster is narrowed with the filters instead.
const MAX_ROWS = 300;
const WAITING_ROWS = 50;

/** GPUs per node for every backend that reports, and the runs waiting to run. */
export function Cluster() {
  const view = useQuery({
    queryKey: ['cluster'],
    refetchInterval: 5_000,
    queryFn: async () => unwrap(await api.GET('/api/v1/cluster')),
  });
  if (view.isPending) return <Loading what="the cluster" />;
  if (view.isError) return <ErrorBox error={view.error} retry={() => void view.refetch()} />;
  const { clusters, waiting } = view.data;
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / Cluster
      </nav>
      <h1>Cluster</h1>
      {clusters.length === 0 && (
        <Empty>
          No backend has reported its machines yet. On Kubernetes the operator (<code>crucible operator</code>) reports
          the cluster every few seconds; in the embedded mode <code>crucible up</code> reports this machine once its
          executor starts.
        </Empty>
      )}
      {clusters.map((cluster) => (
        <section key={cluster.name} aria-label={`Cluster ${cluster.name}`}>
          <h2>
            {cluster.name === 'local' ? 'This machine (local executor)' : `Kubernetes (${cluster.name})`}{' '}
            <span className="muted small">reported {age(cluster.reported_at)} ago</span>
          </h2>
          <Nodes nodes={cluster.nodes} />
        </section>
      ))}
      <section>
        <h2>Waiting runs</h2>
        {waiting.length === 0 && <Empty>No run is waiting: every submitted run is running or finished.</Empty>}
        {waiting.length > 0 && (
          <div className="scroll-x">
            <table aria-label="Waiting runs">
              <thead>
                <tr>
                  <th>Run</th>
                  <th>Kind</th>
                  <th>Backend</th>
                  <th>Phase</th>
                  <th className="num">GPUs</th>
                  <th>Waiting for</th>
                  <th>Why</th>
                </tr>
              </thead>
              <tbody>
                {waiting.slice(0, WAITING_ROWS).map((run) => (
                  <tr key={run.id}>
                    <td>
                      <a href={href.run(run.id)}>{run.name}</a>
                    </td>
                    <td>{run.kind}</td>
                    <td>{run.backend}</td>
                    <td>
                      <PhaseBadge phase={run.phase} />
                    </td>
                    <td className="num">{run.gpus}</td>
                    <td>{age(run.created_at)}</td>
                    <td className="muted">{[run.reason, run.message].filter(Boolean).join(': ') || '—'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {waiting.length > WAITING_ROWS && (
              <p className="muted">
                and {waiting.length - WAITING_ROWS} more, oldest first (the list stops at 500); each experiment&apos;s runs table
                filters by phase.
              </p>
            )}
          </div>
        )}
      </section>
    </>
  );
}

function Nodes({ nodes }: { nodes: ClusterNode[] }) {
  const [text, setText] = useState('');
  const [show, setShow] = useState<NodeFilter>('all');
  const summary = summarize(nodes);
  const shown = filterNodes(nodes, text, show);
  return (
    <>
      <p aria-label="GPU summary">
        <strong>
          {summary.gpusAllocated.toLocaleString()} of {summary.gpus.toLocaleString()} GPUs allocated
        </strong>{' '}
        on {summary.nodes.toLocaleString()} nodes: {summary.full} full, {summary.partial} partly used, {summary.idle} idle
        {summary.notReady > 0 && `, ${summary.notReady} not ready`}.
      </p>
      <div className="toolbar">
        <label>
          Node
          <input type="search" value={text} placeholder="name contains…" onChange={(event) => setText(event.target.value)} />
        </label>
        <label>
          Show
          <select value={show} onChange={(event) => setShow(event.target.value as NodeFilter)}>
            <option value="all">all nodes</option>
            <option value="busy">nodes running something</option>
            <option value="free">nodes with a free GPU</option>
            <option value="notReady">nodes not ready</option>
          </select>
        </label>
        <span className="muted">
          {shown.length > MAX_ROWS ? `the first ${MAX_ROWS} of ${shown.length}` : `${shown.length} shown`}
        </span>
      </div>
      {shown.length === 0 ? (
        <Empty>No node matches; clear the filters to see them all.</Empty>
      ) : (
        <div className="scroll-x">
          <table aria-label="Nodes">
            <thead>
              <tr>
                <th>Node</th>
                <th>State</th>
                <th>GPU</th>
                <th className="num">GPUs allocated</th>
                <th>Use</th>
              </tr>
            </thead>
            <tbody>
              {shown.slice(0, MAX_ROWS).map((node) => (
                <tr key={node.name}>
                  <td>
                    <code>{node.name}</code>
                  </td>
                  <td>{!node.ready ? 'not ready' : !node.schedulable ? 'cordoned' : 'ready'}</td>
                  <td>{node.gpu_product || '—'}</td>
                  <td className="num">
                    {node.gpus_allocated} / {node.gpus_allocatable}
                  </td>
                  <td>
                    <meter
                      className="gpu-meter"
                      min={0}
                      max={1}
                      value={usage(node)}
                      aria-label={`${node.name}: ${node.gpus_allocated} of ${node.gpus_allocatable} GPUs allocated`}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

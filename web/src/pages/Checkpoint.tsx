import { useQuery } from '@tanstack/react-query';

import { api, unwrap, type LineageNode } from '../api/client';
import { useExperiment } from '../api/queries';
import { LineageView } from '../components/LineageView';
import { PromoteCheckpoint } from '../components/PromoteCheckpoint';
import { Empty, ErrorBox, Loading } from '../components/states';
import { bytes, dateTime, orDash, score } from '../format';
import { checkpointNeighbours, entityHref } from '../lib/lineage';
import { toYaml } from '../lib/yaml';
import { href, navigate } from '../router';

export function Checkpoint({ id }: { id: number }) {
  const checkpoint = useQuery({
    queryKey: ['checkpoint', id],
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/checkpoints/{checkpoint_id}', { params: { path: { checkpoint_id: id } } })),
  });
  const runId = checkpoint.data?.run_id;
  const run = useQuery({
    queryKey: ['run', runId],
    enabled: runId !== undefined,
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id: runId ?? 0 } } })),
  });
  const evals = useQuery({
    queryKey: ['checkpoint-evals', id],
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/checkpoints/{checkpoint_id}/evals', { params: { path: { checkpoint_id: id } } })),
  });
  // Two hops up reach the producing run's inputs (datasets, a parent checkpoint); one hop
  // down, what was made from this checkpoint.
  const upstream = useQuery({
    queryKey: ['lineage', 'checkpoint', id, 'upstream', 2],
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/lineage/{entity}/{entity_id}', {
          params: { path: { entity: 'checkpoint', entity_id: id }, query: { direction: 'upstream', depth: 2 } },
        }),
      ),
  });
  const downstream = useQuery({
    queryKey: ['lineage', 'checkpoint', id, 'downstream', 1],
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/lineage/{entity}/{entity_id}', {
          params: { path: { entity: 'checkpoint', entity_id: id }, query: { direction: 'downstream', depth: 1 } },
        }),
      ),
  });
  const experiment = useExperiment(run.data?.experiment_id);
  const around = useQuery({
    queryKey: ['lineage', 'checkpoint', id, 'both', 2],
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/lineage/{entity}/{entity_id}', {
          params: { path: { entity: 'checkpoint', entity_id: id }, query: { direction: 'both', depth: 2 } },
        }),
      ),
  });

  if (checkpoint.isPending) return <Loading what="the checkpoint" />;
  if (checkpoint.isError) return <ErrorBox error={checkpoint.error} retry={() => void checkpoint.refetch()} />;
  const c = checkpoint.data;
  const r = run.data;
  const near = checkpointNeighbours(upstream.data, downstream.data);
  const config = r?.manifest.spec && typeof r.manifest.spec === 'object' ? (r.manifest.spec as Record<string, unknown>).config : undefined;

  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / {experiment.data ? <a href={href.experiment(experiment.data.id)}>{experiment.data.name}</a> : '…'} /{' '}
        <a href={href.run(c.run_id)}>{r?.name ?? `run ${c.run_id}`}</a> / step {c.step}
      </nav>
      <h1>
        {r?.name ?? `Run ${c.run_id}`} · step {c.step}
        {c.deleted_at && <span className="phase phase-Failed">removed</span>}
      </h1>
      <dl className="facts">
        <dt>Run</dt>
        <dd>
          <a href={href.run(c.run_id)}>{r?.name ?? c.run_id}</a>
        </dd>
        <dt>Saved</dt>
        <dd>{dateTime(c.created_at)}</dd>
        <dt>Where</dt>
        <dd>
          <code>{c.uri}</code>
        </dd>
        <dt>Digest</dt>
        <dd>
          <code>{c.digest}</code>
        </dd>
        <dt>Size</dt>
        <dd>{bytes(c.size_bytes)}</dd>
        {c.deleted_at && (
          <>
            <dt>Removed</dt>
            <dd>{dateTime(c.deleted_at)} by retention; its record and lineage stay.</dd>
          </>
        )}
        <dt>Lineage</dt>
        <dd>
          <a href={href.lineage('checkpoint', c.id)}>Open in the lineage explorer</a>
        </dd>
      </dl>

      {r && <PromoteCheckpoint checkpoint={c} runName={r.name} projectId={r.project_id} />}

      <section>
        <h2>Eval scores</h2>
        {evals.isPending && <Loading what="eval scores" />}
        {evals.isError && <ErrorBox error={evals.error} retry={() => void evals.refetch()} />}
        {evals.data?.length === 0 && (
          <Empty>No eval has scored this checkpoint yet. The eval trigger starts an EvalJob for each new checkpoint of a run with evals in its spec.</Empty>
        )}
        {evals.data && evals.data.length > 0 && (
          <table aria-label="Eval scores">
            <thead>
              <tr>
                <th>Suite</th>
                <th>Metric</th>
                <th className="num">Score</th>
                <th>Eval run</th>
                <th>Recorded</th>
              </tr>
            </thead>
            <tbody>
              {evals.data.flatMap((result) =>
                Object.entries(result.scores).map(([metric, value]) => (
                  <tr key={`${result.id}/${metric}`}>
                    <td>{result.suite}</td>
                    <td>{metric}</td>
                    <td className="num">{score(value)}</td>
                    <td>{result.eval_run_id ? <a href={href.run(result.eval_run_id)}>run {result.eval_run_id}</a> : '—'}</td>
                    <td>{dateTime(result.created_at)}</td>
                  </tr>
                )),
              )}
            </tbody>
          </table>
        )}
      </section>

      <div className="two-columns">
        <section aria-label="Upstream">
          <h2>Made from</h2>
          {upstream.isError && <ErrorBox error={upstream.error} retry={() => void upstream.refetch()} />}
          {upstream.isPending && <Loading what="upstream lineage" />}
          <dl className="facts">
            <dt>Datasets</dt>
            <dd>
              <NodeLinks nodes={near.datasets} empty="none recorded" digests />
            </dd>
            <dt>Parent checkpoint</dt>
            <dd>
              <NodeLinks nodes={near.parents} empty="none: trained from scratch" />
            </dd>
            <dt>Code</dt>
            <dd>{r?.code_ref ? <code>{r.code_ref}</code> : orDash(r?.code_ref)}</dd>
            <dt>Spec digest</dt>
            <dd>{r ? <code>{r.spec_digest.slice(0, 23)}…</code> : '—'}</dd>
          </dl>
          <h3>Config</h3>
          {config === undefined ? <p className="muted">The run&apos;s spec has no config.</p> : <pre className="yaml">{toYaml(config)}</pre>}
        </section>
        <section aria-label="Downstream">
          <h2>Made from it</h2>
          {downstream.isError && <ErrorBox error={downstream.error} retry={() => void downstream.refetch()} />}
          {downstream.isPending && <Loading what="downstream lineage" />}
          <dl className="facts">
            <dt>Evals</dt>
            <dd>
              <NodeLinks nodes={near.evals} empty="none yet" />
            </dd>
            <dt>Rollouts</dt>
            <dd>
              <NodeLinks nodes={near.rollouts} empty="none" />
            </dd>
            <dt>Runs started from it</dt>
            <dd>
              <NodeLinks nodes={near.runs} empty="none" />
            </dd>
          </dl>
        </section>
      </div>

      <section>
        <h2>Graph</h2>
        {around.isError && <ErrorBox error={around.error} retry={() => void around.refetch()} />}
        {around.data && <LineageView graph={around.data} height={380} onOpen={(next) => navigate(href.lineage(next.type, next.id))} />}
      </section>
    </>
  );
}

function NodeLinks({ nodes, empty, digests = false }: { nodes: LineageNode[]; empty: string; digests?: boolean }) {
  if (nodes.length === 0) return <span className="muted">{empty}</span>;
  return (
    <ul className="inline-list">
      {nodes.map((node) => (
        <li key={`${node.type}:${node.id}`}>
          <a href={entityHref(node) ?? href.lineage(node.type, node.id)}>{node.label}</a>
          {digests && typeof node.data.digest === 'string' && (
            <>
              {' '}
              <code className="small" title={node.data.digest}>
                {node.data.digest.slice(0, 23)}…
              </code>
            </>
          )}
        </li>
      ))}
    </ul>
  );
}

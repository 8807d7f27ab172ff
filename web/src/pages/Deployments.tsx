import { useQuery } from '@tanstack/react-query';

import { api, unwrap } from '../api/client';
import { Empty, ErrorBox, Loading } from '../components/states';
import { age } from '../format';
import { readiness, rollout } from '../lib/deployments';
import { href } from '../router';

// One page, newest first: a platform serves tens of checkpoints, not thousands.
const PAGE_SIZE = 200;

/** Served checkpoints as their backends report them: which checkpoint each serves, whether
 * it is rolling to another, and how many of its pods are ready. */
export function Deployments() {
  const page = useQuery({
    queryKey: ['deployments'],
    refetchInterval: 5_000,
    queryFn: async () => unwrap(await api.GET('/api/v1/deployments', { params: { query: { limit: PAGE_SIZE } } })),
  });
  if (page.isPending) return <Loading what="the deployments" />;
  if (page.isError) return <ErrorBox error={page.error} retry={() => void page.refetch()} />;
  const deployments = page.data.items;
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / Deployments
      </nav>
      <h1>Deployments</h1>
      {deployments.length === 0 ? (
        <Empty>
          No checkpoint is served yet. On Kubernetes, apply a <code>ServedModel</code>; the operator reports it here.
        </Empty>
      ) : (
        <div className="scroll-x">
          <table aria-label="Deployments">
            <thead>
              <tr>
                <th>Name</th>
                <th>Project</th>
                <th>Serving</th>
                <th>Checkpoint</th>
                <th className="num">Ready</th>
                <th>Phase</th>
                <th>URL</th>
                <th>Reported</th>
              </tr>
            </thead>
            <tbody>
              {deployments.map((deployment) => (
                <tr key={deployment.id}>
                  <td>
                    <code>{deployment.name}</code> <span className="muted small">{deployment.backend}</span>
                  </td>
                  <td>{deployment.project}</td>
                  <td>
                    {deployment.serving ? (
                      <>
                        <a href={href.checkpoint(deployment.serving.id)}>{deployment.serving.id}</a> ·{' '}
                        <a href={href.run(deployment.serving.run_id)}>{deployment.serving.run_name}</a> step{' '}
                        {deployment.serving.step.toLocaleString('en-US')}
                      </>
                    ) : (
                      '—'
                    )}
                  </td>
                  <td className="muted">{rollout(deployment)}</td>
                  <td className="num">{readiness(deployment)}</td>
                  <td>
                    <span className={`phase phase-${deployment.phase}`} title={deployment.message || undefined}>
                      {deployment.phase}
                    </span>
                  </td>
                  <td>{deployment.url ? <code>{deployment.url}</code> : '—'}</td>
                  <td>{age(deployment.updated_at)} ago</td>
                </tr>
              ))}
            </tbody>
          </table>
          {page.data.next_cursor && <p className="muted">Showing the newest {PAGE_SIZE}; the API lists the rest.</p>}
        </div>
      )}
    </>
  );
}

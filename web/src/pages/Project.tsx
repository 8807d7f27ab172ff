import { useQuery } from '@tanstack/react-query';

import { api, unwrap } from '../api/client';
import { useProject } from '../api/queries';
import { PhaseBadge } from '../components/PhaseBadge';
import { Empty, ErrorBox, Loading } from '../components/states';
import { age } from '../format';
import { href } from '../router';

export function Project({ id }: { id: number }) {
  const project = useProject(id);
  const name = project.data?.name;
  const experiments = useQuery({
    queryKey: ['experiments', name],
    enabled: name !== undefined,
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/experiments', { params: { query: { project: name, limit: 500 } } })),
  });
  // The newest sweeps; a listing carries no trials, so each shows its budget and message.
  const sweeps = useQuery({
    queryKey: ['sweeps', name],
    enabled: name !== undefined,
    refetchInterval: (query) => (query.state.data?.items.some((sweep) => sweep.phase === 'Running') ? 15_000 : false),
    queryFn: async () => unwrap(await api.GET('/api/v1/sweeps', { params: { query: { project: name, limit: 50 } } })),
  });

  if (project.isError) return <ErrorBox error={project.error} />;
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / {name ?? '…'}
      </nav>
      <h1>Experiments in {name ?? '…'}</h1>
      <nav className="toolbar" aria-label="Submit">
        <a className="button" href={href.submit(id)}>
          New run
        </a>
        <a className="button" href={href.submit(id, { from: 'sweep' })}>
          Start a sweep
        </a>
      </nav>
      {(project.isPending || experiments.isPending) && <Loading what="experiments" />}
      {experiments.isError && <ErrorBox error={experiments.error} />}
      {experiments.data?.items.length === 0 && (
        <Empty>
          No experiments yet. Submitting a run creates its experiment: New run above, or{' '}
          <code>crucible submit run.yaml</code>.
        </Empty>
      )}
      {experiments.data && experiments.data.items.length > 0 && (
        <ul className="cards">
          {experiments.data.items.map((experiment) => (
            <li key={experiment.id}>
              <a href={href.experiment(experiment.id)}>{experiment.name}</a>
              <span className="muted">
                {experiment.description || `created ${age(experiment.created_at)} ago`}
              </span>
            </li>
          ))}
        </ul>
      )}
      {sweeps.isError && <ErrorBox error={sweeps.error} />}
      {sweeps.data && sweeps.data.items.length > 0 && (
        <section aria-labelledby="sweeps-heading">
          <h2 id="sweeps-heading">Sweeps</h2>
          <ul className="cards" aria-label="Sweeps">
            {sweeps.data.items.map((sweep) => (
              <li key={sweep.id}>
                <a href={href.sweep(sweep.id)}>{sweep.name}</a>
                <PhaseBadge phase={sweep.phase} />
                <span className="muted">
                  {sweep.budget} {sweep.budget === 1 ? 'trial' : 'trials'} · {sweep.goal} {sweep.metric}
                </span>
                <span className="muted">{sweep.message || `started ${age(sweep.created_at)} ago`}</span>
              </li>
            ))}
          </ul>
        </section>
      )}
    </>
  );
}

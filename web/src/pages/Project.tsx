import { useQuery } from '@tanstack/react-query';

import { api, unwrap } from '../api/client';
import { useProject } from '../api/queries';
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

  if (project.isError) return <ErrorBox error={project.error} />;
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / {name ?? '…'}
      </nav>
      <h1>Experiments in {name ?? '…'}</h1>
      {(project.isPending || experiments.isPending) && <Loading what="experiments" />}
      {experiments.isError && <ErrorBox error={experiments.error} />}
      {experiments.data?.items.length === 0 && (
        <Empty>
          No experiments yet. Submitting a run creates its experiment:{' '}
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
    </>
  );
}

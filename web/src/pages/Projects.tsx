import { useQuery } from '@tanstack/react-query';

import { api, unwrap } from '../api/client';
import { Empty, ErrorBox, Loading } from '../components/states';
import { href } from '../router';

export function Projects() {
  const projects = useQuery({
    queryKey: ['projects'],
    queryFn: async () => unwrap(await api.GET('/api/v1/projects', { params: { query: { limit: 500 } } })),
  });

  return (
    <>
      <h1>Projects</h1>
      {projects.isPending && <Loading what="projects" />}
      {projects.isError && <ErrorBox error={projects.error} retry={() => void projects.refetch()} />}
      {projects.data?.items.length === 0 && (
        <Empty>No projects yet. Create one with <code>crucible project create NAME</code>.</Empty>
      )}
      {projects.data && projects.data.items.length > 0 && (
        <ul className="cards">
          {projects.data.items.map((project) => (
            <li key={project.id}>
              <a href={href.project(project.id)}>{project.name}</a>
              <span className="muted">{project.description || `namespace ${project.namespace}`}</span>
            </li>
          ))}
        </ul>
      )}
    </>
  );
}

import { useQuery } from '@tanstack/react-query';

import { api, unwrap, type Project, type Run } from '../api/client';
import { useProject, useRun } from '../api/queries';
import { ErrorBox, Loading } from '../components/states';
import { SubmitForm, type Starting } from '../components/SubmitForm';
import { freeName } from '../lib/manifest';
import { runTemplate, sweepTemplate } from '../lib/templates';
import { toYaml } from '../lib/yaml';
import { href, type SubmitStart } from '../router';

// Names a new run or sweep is checked against for a free one; a name older than these that
// clashes is refused by the API with its reason, and the user picks another.
const NAMES_LISTED = 1000;
// Tags the platform sets (a sweep's trial, a reproduction); a resubmission is neither.
const PLATFORM_TAG = 'crucible.dev/';

const TITLES: Record<SubmitStart['from'], string> = {
  run: 'New run',
  sweep: 'Start a sweep',
  resubmit: 'Resubmit',
  reproduce: 'Reproduce',
};

/** The submit page: a YAML editor started from a template, a run's manifest or the
 * submission that reproduces it, checked by the API as it is typed, and submitted through
 * the same calls as `crucible submit` and `crucible sweeps run`. */
export function Submit({ projectId, start }: { projectId: number; start: SubmitStart }) {
  const project = useProject(projectId);
  const runId = start.from === 'resubmit' || start.from === 'reproduce' ? start.runId : undefined;
  const run = useRun(runId);
  const starting = useStarting(project.data, start, run.data);

  const title = TITLES[start.from];
  const error = project.error ?? run.error ?? starting.error;
  return (
    <>
      <nav className="crumbs">
        <a href={href.projects()}>Projects</a> / <a href={href.project(projectId)}>{project.data?.name ?? 'project'}</a>
        {run.data && (
          <>
            {' '}
            / <a href={href.run(run.data.id)}>{run.data.name}</a>
          </>
        )}{' '}
        / {title}
      </nav>
      <h1>
        {title}
        {run.data && ` ${run.data.name}`}
      </h1>
      {start.from === 'reproduce' && (
        <p className="muted">
          The run&apos;s spec with each input pinned to the version it read, and its code as the run recorded it: the image
          digest its pods ran (Kubernetes), or its directory&apos;s commit and changes, checked on the server&apos;s
          machine, where the local executor runs it. The same submission as <code>crucible runs reproduce {runId}</code>.
        </p>
      )}
      {error ? (
        <ErrorBox error={error} />
      ) : starting.data && project.data ? (
        <SubmitForm key={starting.data.key} project={project.data.name} starting={starting.data} />
      ) : (
        <Loading what="the manifest" />
      )}
    </>
  );
}

/** What the editor starts from, once everything it needs has loaded. */
function useStarting(project: Project | undefined, start: SubmitStart, run: Run | undefined) {
  const name = project?.name;
  const sweep = start.from === 'sweep';
  return useQuery({
    queryKey: ['submitStart', name, start, run?.id],
    enabled: name !== undefined && (start.from === 'run' || sweep || run !== undefined),
    // Names change as runs are submitted: a fresh look each time the page opens.
    gcTime: 0,
    staleTime: Infinity,
    queryFn: async (): Promise<Starting> => {
      const project = name ?? '';
      const key = JSON.stringify(start);
      if (start.from === 'reproduce') {
        const body = unwrap(
          await api.GET('/api/v1/runs/{run_id}/reproduction', { params: { path: { run_id: start.runId } } }),
        );
        return { key, text: toYaml(body.manifest), backend: body.backend, reproduction: body };
      }
      const taken = await takenNames(project, sweep);
      if (start.from === 'run') return { key, text: runTemplate(firstFree('run', taken)), backend: 'local' };
      if (sweep) return { key, text: sweepTemplate(firstFree('sweep', taken)), backend: 'local' };
      const original = run as Run;
      const manifest = original.manifest as { metadata: Record<string, unknown> };
      const tags = Object.fromEntries(Object.entries(original.tags).filter(([tag]) => !tag.startsWith(PLATFORM_TAG)));
      return {
        key,
        text: toYaml({ ...manifest, metadata: { ...manifest.metadata, name: freeName(original.name, taken) } }),
        backend: original.backend,
        tags,
      };
    },
  });
}

function firstFree(name: string, taken: ReadonlySet<string>): string {
  return taken.has(name) ? freeName(name, taken) : name;
}

async function takenNames(project: string, sweeps: boolean): Promise<Set<string>> {
  const query = { project, limit: NAMES_LISTED };
  const items: { name: string }[] = sweeps
    ? unwrap(await api.GET('/api/v1/sweeps', { params: { query } })).items
    : unwrap(await api.GET('/api/v1/runs', { params: { query } })).items;
  return new Set(items.map((item) => item.name));
}

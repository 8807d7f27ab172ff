import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useMemo, useState } from 'react';

import { api, unwrap, type Schemas } from '../api/client';
import { useCluster } from '../api/queries';
import { endpointOf, lineOfPath, parseManifest } from '../lib/manifest';
import { href, navigate } from '../router';
import { useDebounced } from '../useDebounced';
import { ManifestEditor, type LineMark } from './ManifestEditor';
import { ErrorBox } from './states';

type Backend = Schemas['Backend'];
type RunSubmit = Schemas['RunSubmit'];

/** What the editor starts from: its text, the backend, and what a run submission carries
 * beside the manifest (a resubmission's tags; a reproduction's whole body). */
export interface Starting {
  key: string;
  text: string;
  backend: Backend;
  tags?: Record<string, string>;
  reproduction?: RunSubmit;
}

// Long enough to skip the keystrokes of a word, short enough to answer while the user looks.
const CHECK_DELAY_MS = 400;
const BACKENDS: readonly Backend[] = ['local', 'kubernetes'];

/** The editor, the API's problems with it as it is typed, and the submission. */
export function SubmitForm({ project, starting }: { project: string; starting: Starting }) {
  const queryClient = useQueryClient();
  const [text, setText] = useState(starting.text);
  const [backend, setBackend] = useState<Backend>(starting.backend);
  const parsed = useMemo(() => parseManifest(text), [text]);
  const manifest = parsed.ok ? parsed.manifest : undefined;
  const asked = useDebounced(manifest, CHECK_DELAY_MS);
  const check = useQuery({
    queryKey: ['manifestCheck', project, asked],
    enabled: asked !== undefined,
    placeholderData: keepPreviousData,
    queryFn: async () =>
      unwrap(await api.POST('/api/v1/manifests/validate', { body: { project, manifest: asked } })),
  });
  const settled = parsed.ok && asked === manifest && !check.isPlaceholderData && check.isSuccess;
  const problems = useMemo(() => (parsed.ok ? (check.data?.errors ?? []) : []), [parsed.ok, check.data]);
  const lines = useMemo(() => problems.map((problem) => lineOfPath(text, problem.path)), [problems, text]);
  const marks: LineMark[] = useMemo(
    () =>
      parsed.ok
        ? problems.flatMap((problem, index) => {
            const line = lines[index];
            return line ? [{ line, message: `${problem.path}: ${problem.message}` }] : [];
          })
        : [{ line: parsed.line, message: parsed.message }],
    [parsed, problems, lines],
  );

  const cluster = useCluster();
  // What the control plane runs on: the local executor always (the CLI's default), and
  // each backend that reports its machines.
  const offered = BACKENDS.filter(
    (name) => name === 'local' || name === backend || cluster.data?.clusters.some((c) => c.name === name),
  );
  const endpoint = endpointOf(manifest);

  const submit = useMutation({
    mutationFn: async (): Promise<string> => {
      if (endpoint === 'sweeps') {
        const body = { project, backend, manifest: manifest as Schemas['SweepManifest'] };
        return href.sweep(unwrap(await api.POST('/api/v1/sweeps', { body })).id);
      }
      const body: RunSubmit = {
        ...(starting.reproduction ?? { project, code_ref: '', tags: starting.tags ?? {} }),
        project,
        backend,
        manifest: manifest as RunSubmit['manifest'],
      };
      return href.run(unwrap(await api.POST('/api/v1/runs', { body })).id);
    },
    onSuccess: (to) => {
      void queryClient.invalidateQueries({ queryKey: ['sweeps', project] });
      void queryClient.invalidateQueries({ queryKey: ['experiments', project] });
      navigate(to);
    },
  });

  const refused = !parsed.ok || (settled && problems.length > 0);
  return (
    <form
      aria-label="Submit"
      onSubmit={(event) => {
        event.preventDefault();
        submit.mutate();
      }}
    >
      <ManifestEditor initial={starting.text} onChange={setText} marks={marks} label="Manifest (YAML)" />
      <div className="toolbar">
        <label>
          Backend{' '}
          <select
            value={backend}
            onChange={(event) => setBackend(event.target.value as Backend)}
            disabled={starting.reproduction !== undefined}
            title={starting.reproduction ? 'A reproduction runs where the run ran.' : undefined}
          >
            {offered.map((name) => (
              <option key={name} value={name}>
                {name}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" disabled={refused || submit.isPending}>
          {endpoint === 'sweeps' ? 'Start sweep' : 'Submit run'}
        </button>
        <span className="muted" role="status">
          {!parsed.ok
            ? 'Fix the YAML to have it checked.'
            : !settled
              ? 'Checking…'
              : problems.length === 0
                ? `The API accepts this ${endpoint === 'sweeps' ? 'sweep' : 'run'}.`
                : `${problems.length} ${problems.length === 1 ? 'problem' : 'problems'} to fix.`}
        </span>
      </div>
      {submit.isError && <ErrorBox error={submit.error} />}
      {check.isError && <ErrorBox error={check.error} retry={() => void check.refetch()} />}
      {(!parsed.ok || problems.length > 0) && (
        <ul className="problems" aria-label="Problems">
          {!parsed.ok && (
            <li>
              <span className="line">line {parsed.line}</span> YAML: {parsed.message}
            </li>
          )}
          {problems.map((problem, index) => (
            <li key={`${problem.path}:${problem.message}`}>
              {lines[index] && <span className="line">line {lines[index]}</span>} <code>{problem.path || 'manifest'}</code>:{' '}
              {problem.message}
            </li>
          ))}
        </ul>
      )}
    </form>
  );
}

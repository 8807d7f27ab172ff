import type { Attempt, Run } from '../api/client';

/**
 * Where the run's code came from: the git state of its directory when it was submitted,
 * and for each attempt what actually ran (the image digest its pod ran, the packages its
 * workload reported). `crucible runs reproduce` checks exactly these.
 */
export function CodeProvenance({ run, attempts }: { run: Run; attempts: Attempt[] }) {
  const code = run.code;
  const git = code?.git;
  const ran = attempts.filter((a) => a.image_id || a.packages);
  return (
    <dl className="facts" aria-label="Code provenance">
      <dt>Code directory</dt>
      <dd>{code ? <code>{code.directory}</code> : 'not recorded'}</dd>
      <dt>Commit</dt>
      <dd>{git ? <code>{git.commit}</code> : code ? 'not in a git work tree' : '—'}</dd>
      <dt>Uncommitted changes</dt>
      <dd>{git ? (git.dirty ? <code>{git.diff_digest}</code> : 'none (clean tree)') : '—'}</dd>
      {code?.packages && Object.keys(code.packages).length > 0 && (
        <>
          <dt>Submitted with</dt>
          <dd>{packageList(code.packages)}</dd>
        </>
      )}
      {ran.map((attempt) => (
        <div key={attempt.id} className="facts-row">
          <dt>Attempt {attempt.number} ran</dt>
          <dd>
            {attempt.image_id && <code>{attempt.image_id}</code>}
            {attempt.image_id && attempt.packages && ' · '}
            {attempt.packages && packageList(attempt.packages)}
          </dd>
        </div>
      ))}
    </dl>
  );
}

function packageList(packages: Record<string, string>): string {
  return Object.entries(packages)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, version]) => `${name} ${version}`)
    .join(', ');
}

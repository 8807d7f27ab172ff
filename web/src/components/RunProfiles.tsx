import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';

import { api, unwrap, type Run } from '../api/client';
import { bytes, percent } from '../format';
import {
  PHASE_LABEL,
  phaseSegments,
  profilesView,
  profileTitle,
  shownOperators,
  TOP_OPERATORS_SHOWN,
  type Profile,
  type ProfileSummary,
} from '../lib/profiles';
import { formatMicros } from '../lib/traceTimeline';
import { href } from '../router';
import { ErrorBox } from './states';

/** The steps `config.train.profile_from_step` recorded: per rank, where their time went and
 * the operators that took it, with a link to the trace. Renders nothing for a run without
 * profiles, which is most runs. */
export function RunProfiles({ run, live }: { run: Run; live: boolean }) {
  const profiles = useQuery({
    queryKey: ['profiles', run.id],
    // A live run may reach its profiled steps while the page is open.
    refetchInterval: live ? 30_000 : false,
    queryFn: async () =>
      unwrap(await api.GET('/api/v1/runs/{run_id}/profiles', { params: { path: { run_id: run.id } } })),
  });
  if (profiles.isError) {
    return (
      <section aria-labelledby="profiles-heading">
        <h2 id="profiles-heading">Profiles</h2>
        <ErrorBox error={profiles.error} retry={() => void profiles.refetch()} />
      </section>
    );
  }
  if (!profiles.data) return null;
  const view = profilesView(profiles.data, run.backend);
  if (view === 'nothing') return null;
  return (
    <section aria-labelledby="profiles-heading">
      <h2 id="profiles-heading">Profiles</h2>
      {view === 'message' && <p className="empty">{profiles.data.message}</p>}
      {profiles.data.profiles.map((profile) => (
        <ProfileCard key={profile.name} runId={run.id} profile={profile} />
      ))}
    </section>
  );
}

function ProfileCard({ runId, profile }: { runId: number; profile: Profile }) {
  const title = profileTitle(profile);
  return (
    <article className="profile" aria-label={`Profile ${profile.name}`} data-profile={profile.name}>
      <h3>
        {title}{' '}
        {profile.trace_bytes !== null ? (
          <a href={href.profileTrace(runId, profile.name)}>Open the trace</a>
        ) : (
          <span className="muted">no trace</span>
        )}
      </h3>
      {profile.summary ? (
        <Summary summary={profile.summary} traceBytes={profile.trace_bytes} />
      ) : (
        <p className="muted">
          No summary of this profile (recorded before summaries were written, or unreadable); its trace still opens.
        </p>
      )}
    </article>
  );
}

function Summary({ summary, traceBytes }: { summary: ProfileSummary; traceBytes: number | null }) {
  const [showAll, setShowAll] = useState(false);
  const segments = phaseSegments(summary);
  const operators = shownOperators(summary.top_operators, showAll);
  const what = summary.timeline === 'gpu' ? 'kernels' : 'CPU operators (self time)';
  return (
    <>
      <p className="muted">
        {formatMicros(summary.wall_us)} of wall time, {formatMicros(summary.busy_us)} busy on the{' '}
        {summary.timeline === 'gpu' ? "GPU's streams" : "training loop's CPU thread"};{' '}
        {summary.annotated ? "split by the trainer's crucible/ annotations" : "split by operator names (no crucible/ annotations)"}
        {traceBytes !== null && `; trace ${bytes(traceBytes)} gzipped`}.
      </p>
      {/* The bar is a picture of the table below it, which screen readers read instead. */}
      <div className="profile-split" aria-hidden="true">
        {segments.map((segment) => (
          <span
            key={segment.phase}
            className={`profile-segment split-${segment.phase}`}
            data-phase={segment.phase}
            style={{ left: `${segment.offset * 100}%`, width: `${segment.share * 100}%` }}
            title={`${segment.label}: ${percent(segment.share)}, ${formatMicros(segment.totalUs)}`}
          >
            {segment.share >= 0.08 && `${segment.label} ${percent(segment.share)}`}
          </span>
        ))}
      </div>
      <table className="profile-phases" aria-label="Time split">
        <thead>
          <tr>
            <th>Phase</th>
            <th className="num">Time</th>
            <th className="num">Share of wall time</th>
          </tr>
        </thead>
        <tbody>
          {summary.phases.map((phase) => (
            <tr key={phase.phase} data-phase={phase.phase}>
              <td>
                <span className={`swatch split-${phase.phase}`} aria-hidden="true" /> {PHASE_LABEL[phase.phase]}
              </td>
              <td className="num">{formatMicros(phase.total_us)}</td>
              <td className="num">{percent(phase.share)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <table className="profile-operators" aria-label="Top operators">
        <caption>Top {what} by time</caption>
        <thead>
          <tr>
            <th>Name</th>
            <th className="num">Calls</th>
            <th className="num">Total</th>
            <th className="num">Share</th>
          </tr>
        </thead>
        <tbody>
          {operators.map((operator) => (
            <tr key={operator.name}>
              <td className="operator-name" title={operator.name}>
                <code>{operator.name}</code>
              </td>
              <td className="num">{operator.calls.toLocaleString()}</td>
              <td className="num">{formatMicros(operator.total_us)}</td>
              <td className="num">{percent(operator.share)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {summary.top_operators.length > TOP_OPERATORS_SHOWN && (
        <button type="button" className="link" onClick={() => setShowAll(!showAll)}>
          {showAll ? `Show the top ${TOP_OPERATORS_SHOWN}` : `Show all ${summary.top_operators.length}`}
        </button>
      )}
    </>
  );
}

import { useQuery } from '@tanstack/react-query';

import { api, unwrap } from '../api/client';
import { percent, score } from '../format';
import { RL_KEYS, roundLength, seconds, summarizeRl, trainerBar, type BarPart, type RlSummary } from '../lib/rlHealth';
import { ErrorBox } from './states';

// Enough rounds to see a trend in the split without pushing the charts off the screen.
const LAST_ROUNDS = 10;

const PART_NAMES: Record<BarPart['part'], string> = {
  train: 'training',
  weightUpdate: 'weight update',
  idle: 'idle (waiting for samples)',
  other: 'other',
};

/** An online RL run's rounds: where the trainer's time went and what became of the samples.
 * Renders nothing for a run that logged no `rl/` metrics. */
export function RlHealth({ runId, live }: { runId: number; live: boolean }) {
  const rl = useQuery({
    queryKey: ['rl-health', runId],
    refetchInterval: live ? 15_000 : false,
    // At full detail (no max_points): the totals are sums, which a downsampled series
    // would get wrong, and a round's handful of numbers is small beside the charts' series.
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/runs/{run_id}/metrics', {
          params: { path: { run_id: runId }, query: { keys: RL_KEYS.join(',') } },
        }),
      ),
    select: (history) => summarizeRl(history.series),
  });
  if (rl.isError) return <ErrorBox error={rl.error} retry={() => void rl.refetch()} />;
  if (!rl.data) return null;
  return (
    <section className="rl-health" aria-labelledby="rl-health-heading">
      <h3 id="rl-health-heading">RL health</h3>
      <RlTotals summary={rl.data} />
      {rl.data.rounds.length > 0 && <RoundSplit summary={rl.data} />}
    </section>
  );
}

function count(value: number | undefined): string {
  return value === undefined ? '—' : value.toLocaleString();
}

function RlTotals({ summary }: { summary: RlSummary }) {
  const { idleShare, counts, latest } = summary;
  const samples = [
    counts.samplesAccepted !== undefined && `${count(counts.samplesAccepted)} accepted`,
    counts.samplesTrained !== undefined && `${count(counts.samplesTrained)} trained`,
    counts.discardedStale !== undefined && `${count(counts.discardedStale)} discarded as stale`,
  ].filter(Boolean);
  const agreementStep = Math.max(...Object.values(latest).map((point) => point.step));
  return (
    <dl className="facts" aria-label="RL totals">
      {idleShare !== undefined && (
        <>
          <dt>Trainer idle</dt>
          <dd>
            <strong>{percent(idleShare)}</strong>{' '}
            <span className="muted">of wall time, waiting for samples</span>
          </dd>
        </>
      )}
      {samples.length > 0 && (
        <>
          <dt>Samples</dt>
          <dd>{samples.join(' · ')}</dd>
        </>
      )}
      {counts.episodesFailed !== undefined && (
        <>
          <dt>Episodes failed</dt>
          <dd>
            {count(counts.episodesFailed)}
            {counts.episodes !== undefined && ` of ${count(counts.episodes)}`}{' '}
            <span className="muted">left out of training: the environment, a tool or the reward failed</span>
          </dd>
        </>
      )}
      {counts.generatorsBehind !== undefined && (
        <>
          <dt>Generators</dt>
          <dd>
            {count(counts.generatorsBehind)} shares behind the others · {count(counts.generatorsDropped)} dropped{' '}
            <span className="muted">the run&apos;s log says which and why</span>
          </dd>
        </>
      )}
      {Number.isFinite(agreementStep) && (
        <>
          <dt>Trainer vs generator</dt>
          <dd>
            KL {score(latest.kl?.value)} · ratio mean {score(latest.ratioMean?.value)} · logprob diff max{' '}
            {score(latest.logprobDiffMax?.value)}{' '}
            <span className="muted">at step {agreementStep}, the round&apos;s first update</span>
          </dd>
        </>
      )}
    </dl>
  );
}

function RoundSplit({ summary }: { summary: RlSummary }) {
  const { rounds, totals } = summary;
  const shown = rounds.slice(-LAST_ROUNDS);
  const widest = Math.max(...shown.map(roundLength));
  return (
    <>
      <ul className="legend" aria-label="Bar parts">
        {Object.entries(PART_NAMES).map(([part, name]) => (
          <li key={part}>
            <span className={`swatch rl-part-${part}`} />
            {name}
          </li>
        ))}
      </ul>
      <p className="muted small">
        Generation is a column, not a part of the bar: a round that generates ahead does it beside training, and a synchronous
        round&apos;s generation is its idle time.
      </p>
      <div className="scroll-x">
        <table aria-label="Round time split" className="rl-rounds">
          <thead>
            <tr>
              <th className="num">Round</th>
              <th>Trainer&apos;s time</th>
              <th className="num">Generating</th>
              <th className="num">Training</th>
              <th className="num">Weight update</th>
              <th className="num">Idle</th>
              <th className="num">Wall</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((round) => (
              <tr key={round.step}>
                <td className="num">{round.step}</td>
                <td>
                  <div className="rl-bar">
                    {trainerBar(round, widest).map((part) => (
                      <span
                        key={part.part}
                        className={`rl-part-${part.part}`}
                        style={{ width: `${part.width * 100}%` }}
                        title={`${PART_NAMES[part.part]}: ${seconds(part.seconds)}`}
                      />
                    ))}
                  </div>
                </td>
                <td className="num">{seconds(round.seconds.generate)}</td>
                <td className="num">{seconds(round.seconds.train)}</td>
                <td className="num">{seconds(round.seconds.weightUpdate)}</td>
                <td className="num">{seconds(round.seconds.idle)}</td>
                <td className="num">{seconds(round.seconds.wall)}</td>
              </tr>
            ))}
          </tbody>
          <tfoot>
            <tr>
              <th scope="row" colSpan={2}>
                {shown.length < rounds.length ? `All ${rounds.length} rounds (last ${shown.length} above)` : `All ${rounds.length} rounds`}
              </th>
              <td className="num">{seconds(totals.generate)}</td>
              <td className="num">{seconds(totals.train)}</td>
              <td className="num">{seconds(totals.weightUpdate)}</td>
              <td className="num">{seconds(totals.idle)}</td>
              <td className="num">{seconds(totals.wall)}</td>
            </tr>
          </tfoot>
        </table>
      </div>
    </>
  );
}

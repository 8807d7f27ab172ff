import type { Attempt, RunGoodput } from '../api/client';
import { dateTime, duration, orDash } from '../format';
import { attemptSegments } from '../lib/timeline';

/**
 * The run's attempts on one time axis (each bar an attempt, the gaps the time spent
 * recovering), then the same attempts as a table with why each started and ended.
 */
export function AttemptTimeline({ attempts, goodput }: { attempts: Attempt[]; goodput: RunGoodput | undefined }) {
  const { segments, start, end } = attemptSegments(attempts, Date.now());
  const lost = new Map(goodput?.attempts.map((a) => [a.number, a]));
  return (
    <>
      <ol className="attempt-bars" aria-label="Attempt timeline">
        {segments.map((segment) => {
          const why = segment.endReason ? `ended: ${segment.endReason}` : 'running';
          const label = `Attempt ${segment.number}, started: ${segment.startReason}, ${why}${segment.message ? ` (${segment.message})` : ''}`;
          return (
            <li
              key={segment.number}
              className={`bar ${segment.interrupted ? 'bar-interrupted' : ''} ${segment.running ? 'bar-running' : ''}`}
              style={{ left: `${segment.left * 100}%`, width: `${segment.width * 100}%` }}
              title={label}
              aria-label={label}
              tabIndex={0}
            >
              <span>#{segment.number}</span>
              {segment.interrupted && <span className="bar-reason">{segment.endReason}</span>}
            </li>
          );
        })}
      </ol>
      <div className="attempt-axis muted">
        <span>{new Date(start).toLocaleTimeString()}</span>
        <span>{duration((end - start) / 1000)}</span>
        <span>{new Date(end).toLocaleTimeString()}</span>
      </div>
      <table aria-label="Attempts">
        <thead>
          <tr>
            <th className="num">#</th>
            <th>Started because</th>
            <th>Started</th>
            <th>Ended</th>
            <th>Ended because</th>
            <th className="num">Exit code</th>
            <th className="num">Work lost</th>
            <th className="num">Restart overhead</th>
          </tr>
        </thead>
        <tbody>
          {attempts.map((attempt) => {
            const spent = lost.get(attempt.number);
            return (
              <tr key={attempt.id}>
                <td className="num">{attempt.number}</td>
                <td>{attempt.start_reason}</td>
                <td>{dateTime(attempt.started_at ?? attempt.created_at)}</td>
                <td>{dateTime(attempt.ended_at)}</td>
                <td title={attempt.message}>
                  {orDash(attempt.end_reason)}
                  {attempt.message && <div className="muted small">{attempt.message}</div>}
                </td>
                <td className="num">{orDash(attempt.exit_code)}</td>
                <td className="num">{spent ? duration(spent.work_lost_s) : '—'}</td>
                <td className="num">{spent ? duration(spent.restart_overhead_s) : '—'}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </>
  );
}

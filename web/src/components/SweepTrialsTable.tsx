import { useState } from 'react';

import { formatValue, parameterLabel, sortTrials, toggleTrialSort, type Goal, type Sweep, type TrialSort } from '../lib/sweeps';
import { href } from '../router';
import { PhaseBadge } from './PhaseBadge';

/** Every trial started: its run, phase, point (a column per parameter), the metric's last
 * value and step, and why ASHA stopped it; sortable by number or by the metric. */
export function SweepTrialsTable({ sweep, paths, best }: { sweep: Sweep; paths: string[]; best: { number: number; final: boolean } | null }) {
  const [sort, setSort] = useState<TrialSort>({ key: 'number', descending: false });
  const goal = sweep.goal as Goal;
  const rows = sortTrials(sweep.trials, sort);

  function header(label: string, key: TrialSort['key'], className?: string) {
    const order = sort.key === key ? (sort.descending ? 'descending' : 'ascending') : undefined;
    return (
      <th aria-sort={order} className={className}>
        <button type="button" className="sort" onClick={() => setSort(toggleTrialSort(sort, key, goal))}>
          {label}
          <span aria-hidden="true">{order === 'ascending' ? ' ▲' : order === 'descending' ? ' ▼' : ''}</span>
        </button>
      </th>
    );
  }

  return (
    <div className="scroll-x">
      <table aria-label="Trials" className="trials">
        <thead>
          <tr>
            {header('#', 'number', 'num')}
            <th>Run</th>
            <th>Phase</th>
            {paths.map((path) => (
              <th key={path} className="num" title={path}>
                {parameterLabel(path)}
              </th>
            ))}
            {header(sweep.metric, 'value', 'num')}
            <th className="num">Step</th>
            <th>Early stopping</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((trial) => {
            const isBest = best?.number === trial.number;
            return (
              <tr key={trial.number} className={isBest ? 'best' : undefined} data-trial={trial.number}>
                <td className="num">{trial.number}</td>
                <td>
                  <a href={href.run(trial.run_id)}>{trial.run_name}</a>
                  {isBest && (
                    <span className="best-mark" aria-label={best.final ? 'best trial' : 'best so far'}>
                      {' '}
                      ★ {best.final ? 'best' : 'best so far'}
                    </span>
                  )}
                </td>
                <td>
                  <PhaseBadge phase={trial.phase} />
                </td>
                {paths.map((path) => (
                  <td key={path} className="num">
                    {formatValue(trial.point[path])}
                  </td>
                ))}
                <td className="num">{formatValue(trial.value)}</td>
                <td className="num">{formatValue(trial.step)}</td>
                <td>
                  {trial.stopped_reason ? (
                    <details className="stopped">
                      <summary title={trial.stopped_reason}>stopped by ASHA</summary>
                      <span className="reason">{trial.stopped_reason}</span>
                    </details>
                  ) : (
                    <span className="muted">—</span>
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

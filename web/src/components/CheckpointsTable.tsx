import type { Checkpoint, EvalResult } from '../api/client';
import { bytes, dateTime, score } from '../format';
import { evalColumns, scoresByCheckpoint } from '../lib/evals';
import { href } from '../router';

/** The run's checkpoints by step, with a column per eval suite and metric. */
export function CheckpointsTable({ checkpoints, evals }: { checkpoints: Checkpoint[]; evals: EvalResult[] }) {
  const columns = evalColumns(evals);
  const scores = scoresByCheckpoint(evals);
  return (
    <div className="scroll-x">
      <table aria-label="Checkpoints">
        <thead>
          <tr>
            <th className="num">Step</th>
            <th>Saved</th>
            <th className="num">Size</th>
            <th>Digest</th>
            {columns.map((column) => (
              <th key={column.key} className="num" title={`suite ${column.suite}, metric ${column.metric}`}>
                {column.suite}
                <div className="small">{column.metric}</div>
              </th>
            ))}
            <th>Lineage</th>
          </tr>
        </thead>
        <tbody>
          {checkpoints.map((checkpoint) => {
            const row = scores.get(checkpoint.id);
            return (
              <tr key={checkpoint.id} className={checkpoint.deleted_at ? 'muted' : undefined}>
                <td className="num">
                  <a href={href.checkpoint(checkpoint.id)}>{checkpoint.step}</a>
                </td>
                <td>
                  {dateTime(checkpoint.created_at)}
                  {checkpoint.deleted_at && <span className="small"> · removed by retention</span>}
                </td>
                <td className="num">{bytes(checkpoint.size_bytes)}</td>
                <td>
                  <code title={checkpoint.digest}>{checkpoint.digest.slice(0, 19)}…</code>
                </td>
                {columns.map((column) => (
                  <td key={column.key} className="num">
                    {row?.has(column.key) ? score(row.get(column.key)) : <span className="muted" title="not scored by this suite yet">—</span>}
                  </td>
                ))}
                <td>
                  <a href={href.lineage('checkpoint', checkpoint.id)} aria-label={`Lineage of step ${checkpoint.step}`}>
                    graph
                  </a>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

import {
  formatValue,
  parameterLabel,
  scatterPoints,
  STATUS_LABEL,
  ticks,
  type Axis,
  type Box,
  type SweepTrial,
  type TrialStatus,
} from '../lib/sweeps';

const BOX: Box = { width: 320, height: 220, margin: [12, 14, 40, 56] };

export const STATUSES: TrialStatus[] = ['finished', 'running', 'stopped', 'failed'];

/** The metric against one parameter: a point per trial, coloured by where the trial stands,
 * the best ringed. The trials table holds the same numbers as text. */
export function ParamScatter({
  path,
  metric,
  x,
  y,
  trials,
  best,
}: {
  path: string;
  metric: string;
  x: Axis;
  y: Axis;
  trials: SweepTrial[];
  best: number | null;
}) {
  const points = scatterPoints(trials, path, x, y, BOX, best);
  const [top, right, bottom, left] = BOX.margin;
  const plotBottom = BOX.height - bottom;
  const plotRight = BOX.width - right;
  const bestTrial = trials.find((t) => t.number === best);
  const summary =
    `${metric} against ${parameterLabel(path)}${x.kind === 'log' ? ' (log scale)' : ''}: ${points.length} of ${trials.length} trials have a value` +
    (bestTrial ? `; best is trial ${bestTrial.number} at ${formatValue(bestTrial.point[path])}, ${metric} ${formatValue(bestTrial.value)}` : '') +
    '.';
  return (
    <figure className="chart scatter" data-testid={`scatter-${path}`}>
      <figcaption>
        <strong>{parameterLabel(path)}</strong> <span className="muted">{x.kind === 'log' ? 'log scale' : ''}</span>
      </figcaption>
      <svg viewBox={`0 0 ${BOX.width} ${BOX.height}`} role="img" aria-label={summary}>
        <line className="axis" x1={left} y1={plotBottom} x2={plotRight} y2={plotBottom} />
        <line className="axis" x1={left} y1={top} x2={left} y2={plotBottom} />
        {ticks(x).map((tick) => {
          const at = left + tick.at * (plotRight - left);
          return (
            <g key={`x-${tick.label}`} className="tick">
              <line x1={at} y1={plotBottom} x2={at} y2={plotBottom + 4} />
              <text x={at} y={plotBottom + 16} textAnchor="middle">
                {tick.label}
              </text>
            </g>
          );
        })}
        {ticks(y).map((tick) => {
          const at = plotBottom - tick.at * (plotBottom - top);
          return (
            <g key={`y-${tick.label}`} className="tick">
              <line x1={left - 4} y1={at} x2={left} y2={at} />
              <text x={left - 6} y={at + 4} textAnchor="end">
                {tick.label}
              </text>
            </g>
          );
        })}
        <text className="axis-title" x={(left + plotRight) / 2} y={BOX.height - 6} textAnchor="middle">
          {parameterLabel(path)}
        </text>
        {points.map((point) => (
          <circle
            key={point.number}
            className={`point status-${point.status}${point.best ? ' best' : ''}`}
            cx={point.x}
            cy={point.y}
            r={point.best ? 7 : 5}
          >
            <title>
              {`trial ${point.number} (${STATUS_LABEL[point.status]}${point.best ? ', best' : ''})`}
            </title>
          </circle>
        ))}
      </svg>
    </figure>
  );
}

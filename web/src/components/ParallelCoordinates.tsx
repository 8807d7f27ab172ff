import { parallelLayout, parameterPaths, rampColor, ticks, type Box, type Sweep } from '../lib/sweeps';

const HEIGHT = 300;
const MARGIN: Box['margin'] = [28, 64, 24, 64];
const AXIS_GAP = 160; // px between axes, so tick labels do not run into the next axis

/** Every trial as a line across one axis per parameter and the metric, coloured by its
 * metric (yellow-green the best seen, purple the worst, grey none yet), the best drawn
 * thick, outlined and on top. */
export function ParallelCoordinates({ sweep }: { sweep: Sweep }) {
  const width = Math.max(480, MARGIN[1] + MARGIN[3] + AXIS_GAP * parameterPaths(sweep).length);
  const layout = parallelLayout(sweep, { width, height: HEIGHT, margin: MARGIN });
  const best = layout.lines.find((line) => line.best);
  const summary =
    `Parallel coordinates of ${sweep.trials.length} trials over ${layout.axes.map((a) => a.label).join(', ')}` +
    (best ? `; the best, trial ${best.number}, is drawn thick and on top` : '') +
    '. The trials table lists the same values.';
  return (
    <figure className="chart parallel" data-testid="parallel-coordinates">
      <div className="scroll-x">
        <svg viewBox={`0 0 ${width} ${HEIGHT}`} width={width} height={HEIGHT} role="img" aria-label={summary}>
          {layout.lines.map((line) => (
            <g key={line.number}>
              {line.best && <path className="best-halo" d={line.d} />}
              <path className={`trial-line${line.best ? ' best' : ''}`} d={line.d} stroke={rampColor(line.good)}>
                <title>{`trial ${line.number}${line.best ? ' (best)' : ''}`}</title>
              </path>
            </g>
          ))}
          {layout.axes.map((axis, i) => {
            // The metric's labels go right of its axis, clear of the lines that end there.
            const last = i === layout.axes.length - 1;
            return (
              <g key={axis.key} className="pc-axis">
                <line className="axis" x1={axis.x} y1={layout.top} x2={axis.x} y2={layout.bottom} />
                <text className="axis-title" x={axis.x} y={layout.top - 12} textAnchor="middle">
                  {axis.label}
                  {axis.axis.kind === 'log' ? ' (log)' : ''}
                </text>
                {ticks(axis.axis).map((tick) => (
                  <text
                    key={tick.label}
                    className="tick"
                    x={last ? axis.x + 6 : axis.x - 6}
                    y={layout.bottom - tick.at * (layout.bottom - layout.top) + 4}
                    textAnchor={last ? 'start' : 'end'}
                  >
                    {tick.label}
                  </text>
                ))}
              </g>
            );
          })}
        </svg>
      </div>
    </figure>
  );
}

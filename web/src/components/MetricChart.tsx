import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

import type { MetricSeries } from '../api/client';

const HEIGHT = 220;

/** One metric's curve against step, drawn on a canvas by uPlot. */
export function MetricChart({ series }: { series: MetricSeries }) {
  const container = useRef<HTMLDivElement>(null);

  useEffect(() => {
    const element = container.current;
    if (!element) return;
    const options: uPlot.Options = {
      width: element.clientWidth || 600,
      height: HEIGHT,
      scales: { x: { time: false } },
      legend: { show: true },
      axes: [{ label: 'step' }, {}],
      series: [{ label: 'step' }, { label: series.key, stroke: '#2563eb', width: 1.5 }],
    };
    const plot = new uPlot(options, [series.steps, series.values], element);
    const resize = new ResizeObserver(() => {
      plot.setSize({ width: element.clientWidth, height: HEIGHT });
    });
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [series]);

  return (
    <figure className="chart">
      <figcaption>
        <strong>{series.key}</strong>{' '}
        <span className="muted">
          {series.downsampled
            ? `${series.steps.length.toLocaleString()} of ${series.total_points.toLocaleString()} points`
            : `${series.total_points.toLocaleString()} points`}
        </span>
      </figcaption>
      <div ref={container} data-testid={`chart-${series.key}`} />
    </figure>
  );
}

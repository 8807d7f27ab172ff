import { useMemo } from 'react';
import type uPlot from 'uplot';

import type { MetricSeries } from '../api/client';
import { resolutionNote, type StepWindow } from '../lib/zoom';
import { LineChart } from './LineChart';

/** One metric's curve against step; dragging across it zooms every chart of the run. */
export function MetricChart({ series, onZoom }: { series: MetricSeries; onZoom?: (window: StepWindow) => void }) {
  const data = useMemo<uPlot.AlignedData>(() => [series.steps, series.values], [series]);
  const labels = useMemo(() => [series.key], [series.key]);
  return (
    <figure className="chart">
      <figcaption>
        <strong>{series.key}</strong> <span className="muted">{resolutionNote(series)}</span>
      </figcaption>
      <LineChart data={data} labels={labels} testId={`chart-${series.key}`} onZoom={onZoom} />
    </figure>
  );
}

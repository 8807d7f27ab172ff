import type { MetricSeries } from '../api/client';

/** A step range the charts are zoomed to; the server is asked for just these steps. */
export interface StepWindow {
  stepMin: number;
  stepMax: number;
}

/**
 * The whole steps a drag across a chart selected, or null when it spans less than two steps
 * (a click, or a zoom past the data's resolution), which would not change what is drawn.
 */
export function stepWindow(from: number, to: number): StepWindow | null {
  if (!Number.isFinite(from) || !Number.isFinite(to)) return null;
  const stepMin = Math.max(0, Math.floor(Math.min(from, to)));
  const stepMax = Math.ceil(Math.max(from, to));
  return stepMax - stepMin < 2 ? null : { stepMin, stepMax };
}

/** "2,000 of 1,000,000 points": how much of the series the chart is drawing. */
export function resolutionNote(series: MetricSeries): string {
  const total = series.total_points.toLocaleString('en-US');
  return series.downsampled
    ? `${series.steps.length.toLocaleString('en-US')} of ${total} points`
    : `${total} points`;
}

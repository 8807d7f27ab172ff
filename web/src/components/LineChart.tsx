import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

import { tickLabel } from '../format';
import { stepWindow, type StepWindow } from '../lib/zoom';
import { cssColor, useTheme } from '../theme';

const HEIGHT = 220;

// Line colours come from the theme (--series-0 … --series-7 in styles.css), by position, so
// the same run has the same colour on every chart of the compare page.
const PALETTE_SIZE = 8;

export function seriesColor(index: number): string {
  return `var(--series-${index % PALETTE_SIZE})`;
}

interface Props {
  /** x (steps) first, then one y array per line; null where a line has no point at that step. */
  data: uPlot.AlignedData;
  labels: string[];
  testId: string;
  /** Called with the steps a drag across the chart selected; without it dragging does nothing. */
  onZoom?: (window: StepWindow) => void;
}

/** Lines against step, drawn on a canvas by uPlot. */
export function LineChart({ data, labels, testId, onZoom }: Props) {
  const container = useRef<HTMLDivElement>(null);
  const zoom = useRef(onZoom);
  const plotRef = useRef<uPlot | null>(null);
  const latest = useRef(data);
  const { theme } = useTheme();

  useEffect(() => {
    zoom.current = onZoom;
  }, [onZoom]);

  // A live run's refetch replaces the points without rebuilding the chart, so the legend and
  // cursor stay where the reader left them. Declared before the effect that builds the chart,
  // so a rebuild starts from the newest data.
  useEffect(() => {
    latest.current = data;
    plotRef.current?.setData(data);
  }, [data]);

  useEffect(() => {
    const element = container.current;
    if (!element) return;
    const ink = cssColor('--muted');
    const grid = cssColor('--border');
    const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const options: uPlot.Options = {
      width: element.clientWidth || 600,
      height: HEIGHT,
      scales: { x: { time: false } },
      legend: { show: true },
      // The drag selects steps; the page asks the server for them at full resolution rather
      // than letting uPlot stretch the points it already has.
      cursor: { drag: { x: true, y: false, setScale: false } },
      // uPlot's own labels print every digit: FLOP/s overflow the axis and a small learning
      // rate rounds to 0.
      axes: [{ ...axis, label: 'step' }, { ...axis, values: (_plot, splits) => splits.map(tickLabel) }],
      series: [
        { label: 'step' },
        ...labels.map((label, index) => ({
          label,
          stroke: cssColor(`--series-${index % PALETTE_SIZE}`),
          width: 1.5,
          spanGaps: true,
        })),
      ],
      hooks: {
        setSelect: [
          (plot) => {
            const { left, width } = plot.select;
            const picked = width > 2 ? stepWindow(plot.posToVal(left, 'x'), plot.posToVal(left + width, 'x')) : null;
            plot.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
            if (picked && zoom.current) zoom.current(picked);
          },
        ],
      },
    };
    const plot = new uPlot(options, latest.current, element);
    plotRef.current = plot;
    const resize = new ResizeObserver(() => {
      plot.setSize({ width: element.clientWidth, height: HEIGHT });
    });
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
      plotRef.current = null;
    };
  }, [labels, theme]);

  return <div ref={container} data-testid={testId} />;
}

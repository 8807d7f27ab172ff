import { useQuery } from '@tanstack/react-query';
import { useEffect, useMemo, useRef, useState, type KeyboardEvent, type PointerEvent } from 'react';

import { api, unwrap } from '../api/client';
import { ErrorBox, Loading } from '../components/states';
import {
  boxOf,
  colorSlot,
  formatMicros,
  fullWindow,
  hitTest,
  layoutLanes,
  panBy,
  parseTrace,
  ROW_HEIGHT,
  searchSlices,
  timeAt,
  timeTicks,
  visibleBoxes,
  windowBetween,
  zoomAt,
  type Layout,
  type TimeWindow,
  type Trace,
  type Viewport,
} from '../lib/traceTimeline';
import { href } from '../router';
import { cssColor, useTheme } from '../theme';

// Lanes taller than this scroll; the canvas is only ever this tall, drawn at the scroll offset.
const VIEWPORT_MAX_PX = 560;
const AXIS_HEIGHT_PX = 24;
const ZOOM_STEP = 0.5;
const PAN_STEP = 0.2; // of the visible span
const MIN_LABEL_PX = 40;

/** One profile's trace as a timeline: a lane per CPU thread and GPU stream, each event a box
 * nested under the events that contain it. */
export function ProfileTrace({ runId, name }: { runId: number; name: string }) {
  const trace = useQuery({
    queryKey: ['profile-trace', runId, name],
    staleTime: Infinity, // a profile's trace is written once
    queryFn: async () =>
      parseTrace(
        unwrap(
          await api.GET('/api/v1/runs/{run_id}/profiles/{name}/trace', { params: { path: { run_id: runId, name } } }),
        ),
      ),
  });
  return (
    <>
      <nav className="crumbs">
        <a href={href.run(runId)}>Run {runId}</a> / profiles / {name}
      </nav>
      <h1>Trace of {name}</h1>
      {trace.isPending && <Loading what="the trace" />}
      {trace.isError && <ErrorBox error={trace.error} retry={() => void trace.refetch()} />}
      {trace.data && trace.data.slices.length === 0 && <p className="empty">This trace has no complete events to draw.</p>}
      {trace.data && trace.data.slices.length > 0 && <Timeline trace={trace.data} />}
    </>
  );
}

function Timeline({ trace }: { trace: Trace }) {
  const layout = useMemo(() => layoutLanes(trace.lanes), [trace]);
  const bounds = useMemo(() => fullWindow(trace), [trace]);
  const [zoomed, setZoomed] = useState<TimeWindow | null>(null);
  const visible = zoomed ?? bounds;
  const [query, setQuery] = useState('');
  const matches = useMemo(() => searchSlices(trace, query), [trace, query]);
  const [selected, setSelected] = useState<number | null>(null);
  const [hover, setHover] = useState<{ slice: number; x: number; y: number } | null>(null);
  const [drag, setDrag] = useState<{ from: number; to: number } | null>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const [width, setWidth] = useState(0);
  const cellRef = useRef<HTMLDivElement>(null);
  const canvasRef = useRef<HTMLCanvasElement>(null);
  const { theme } = useTheme();
  const height = Math.min(layout.height, VIEWPORT_MAX_PX);
  const view: Viewport = { window: visible, width, top: scrollTop, bottom: scrollTop + height };

  useEffect(() => {
    const cell = cellRef.current;
    if (!cell) return;
    const observer = new ResizeObserver(([entry]) => setWidth(Math.floor(entry?.contentRect.width ?? 0)));
    observer.observe(cell);
    return () => observer.disconnect();
  }, []);

  // Ctrl (or pinch) + wheel zooms about the pointer, as in Perfetto; a sideways wheel or
  // Shift + wheel pans; a plain wheel scrolls the lanes. React's wheel listener is passive,
  // so it could not keep the page from zooming too.
  useEffect(() => {
    const canvas = canvasRef.current;
    if (!canvas || width === 0) return;
    function onWheel(event: WheelEvent) {
      const x = event.offsetX;
      if (event.ctrlKey || event.metaKey) {
        event.preventDefault();
        const factor = Math.exp(event.deltaY * 0.002);
        setZoomed((current) => {
          const at = current ?? bounds;
          return zoomAt(at, factor, timeAt(x, at, width), bounds);
        });
      } else if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
        event.preventDefault();
        const pixels = event.shiftKey ? event.deltaY : event.deltaX;
        setZoomed((current) => {
          const at = current ?? bounds;
          return panBy(at, (pixels / width) * (at.end - at.start), bounds);
        });
      }
    }
    canvas.addEventListener('wheel', onWheel, { passive: false });
    return () => canvas.removeEventListener('wheel', onWheel);
  }, [bounds, width]);

  useEffect(() => {
    const canvas = canvasRef.current;
    if (!canvas || width === 0) return;
    draw(canvas, trace, layout, { window: visible, width, top: scrollTop, bottom: scrollTop + height }, height, {
      matches: query.trim() ? matches : null,
      selected,
      drag,
    });
    // theme: the colours are read from CSS, so a new theme needs a new drawing.
  }, [trace, layout, visible, width, scrollTop, height, matches, query, selected, drag, theme]);

  function zoomBy(factor: number) {
    setZoomed(zoomAt(visible, factor, (visible.start + visible.end) / 2, bounds));
  }
  function pan(fraction: number) {
    setZoomed(panBy(visible, fraction * (visible.end - visible.start), bounds));
  }
  function pointAt(event: PointerEvent<HTMLCanvasElement>) {
    const rect = event.currentTarget.getBoundingClientRect();
    return { x: event.clientX - rect.left, y: event.clientY - rect.top + scrollTop };
  }
  function onPointerDown(event: PointerEvent<HTMLCanvasElement>) {
    if (event.button !== 0) return;
    event.currentTarget.setPointerCapture(event.pointerId);
    const { x } = pointAt(event);
    setDrag({ from: x, to: x });
  }
  function onPointerMove(event: PointerEvent<HTMLCanvasElement>) {
    const { x, y } = pointAt(event);
    if (drag) {
      setDrag({ ...drag, to: x });
      return;
    }
    const slice = hitTest(trace, layout, view, x, y);
    setHover(slice === null ? null : { slice, x, y: y - scrollTop });
  }
  function onPointerUp(event: PointerEvent<HTMLCanvasElement>) {
    if (!drag) return;
    const { x, y } = pointAt(event);
    const range = windowBetween(drag.from, x, visible, width, bounds);
    setDrag(null);
    if (range) setZoomed(range);
    else setSelected(hitTest(trace, layout, view, x, y));
  }
  function onKeyDown(event: KeyboardEvent<HTMLCanvasElement>) {
    const actions: Record<string, () => void> = {
      '+': () => zoomBy(ZOOM_STEP),
      '=': () => zoomBy(ZOOM_STEP),
      '-': () => zoomBy(1 / ZOOM_STEP),
      '0': () => setZoomed(null),
      ArrowLeft: () => pan(-PAN_STEP),
      ArrowRight: () => pan(PAN_STEP),
      Escape: () => setSelected(null),
    };
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  }

  const ticks = timeTicks(visible, width);
  const chosen = selected === null ? undefined : trace.slices[selected];
  const hovered = hover === null ? undefined : trace.slices[hover.slice];
  return (
    <>
      <div className="toolbar trace-toolbar">
        <label>
          Search{' '}
          <input
            type="search"
            value={query}
            placeholder="e.g. aten::mm"
            aria-label="Search events by name"
            onChange={(event) => setQuery(event.target.value)}
          />
        </label>
        <span className="muted" role="status" aria-label="Search matches">
          {query.trim() ? `${matches.length.toLocaleString()} ${matches.length === 1 ? 'event matches' : 'events match'}` : ''}
        </span>
        <span className="spacer" />
        <button type="button" onClick={() => pan(-PAN_STEP)} aria-label="Pan left">
          ←
        </button>
        <button type="button" onClick={() => pan(PAN_STEP)} aria-label="Pan right">
          →
        </button>
        <button type="button" onClick={() => zoomBy(ZOOM_STEP)} aria-label="Zoom in">
          +
        </button>
        <button type="button" onClick={() => zoomBy(1 / ZOOM_STEP)} aria-label="Zoom out">
          −
        </button>
        <button type="button" onClick={() => setZoomed(null)} disabled={zoomed === null}>
          Show all
        </button>
      </div>
      <p className="muted">
        <span aria-label="Visible window" data-start={visible.start} data-end={visible.end}>
          {formatMicros(visible.start)} – {formatMicros(visible.end)} ({formatMicros(visible.end - visible.start)} of{' '}
          {formatMicros(bounds.end)})
        </span>
        . Drag across the lanes to zoom to a range; Ctrl + wheel zooms, Shift + wheel pans; click an event for its
        details. {trace.slices.length.toLocaleString()} events in {trace.lanes.length} lanes.
      </p>
      <div className="trace">
        <div className="trace-axis" style={{ height: AXIS_HEIGHT_PX }}>
          <span />
          <svg width={width} height={AXIS_HEIGHT_PX} aria-hidden="true">
            {ticks.map((tick) => (
              <g key={tick.time} transform={`translate(${tick.x},0)`}>
                <line y1={AXIS_HEIGHT_PX - 6} y2={AXIS_HEIGHT_PX} />
                <text x={3} y={AXIS_HEIGHT_PX - 9}>
                  {tick.label}
                </text>
              </g>
            ))}
          </svg>
        </div>
        <div className="trace-scroll" style={{ height }} onScroll={(event) => setScrollTop(event.currentTarget.scrollTop)}>
          <div className="trace-body" style={{ height: layout.height }}>
            <ol className="trace-lanes" aria-label="Lanes">
              {trace.lanes.map((lane, index) => (
                <li
                  key={index}
                  className={`trace-lane lane-${lane.kind}`}
                  style={{ top: layout.rows[index]?.top, height: layout.rows[index]?.height }}
                  title={lane.label}
                >
                  {lane.label}
                </li>
              ))}
            </ol>
            <div className="trace-cell" ref={cellRef}>
              <canvas
                ref={canvasRef}
                className="trace-canvas"
                tabIndex={0}
                role="img"
                aria-label={`Timeline of ${trace.slices.length} events; keys: + and - zoom, arrows pan, 0 shows all`}
                onPointerDown={onPointerDown}
                onPointerMove={onPointerMove}
                onPointerUp={onPointerUp}
                onPointerLeave={() => setHover(null)}
                onKeyDown={onKeyDown}
              />
              {hovered && hover && !drag && (
                <div
                  className="trace-hover"
                  // On the pointer's side away from the nearer edge, so it never widens the lanes.
                  style={{
                    top: hover.y + scrollTop + 12,
                    ...(hover.x < width / 2 ? { left: hover.x + 12 } : { right: width - hover.x + 12 }),
                  }}
                >
                  <strong>{hovered.name}</strong> {formatMicros(hovered.duration)}
                </div>
              )}
            </div>
          </div>
        </div>
      </div>
      {chosen && selected !== null && (
        <section className="trace-details" aria-label="Selected event">
          <h2>{chosen.name}</h2>
          <dl className="facts">
            <dt>Category</dt>
            <dd data-field="category">{chosen.category || '—'}</dd>
            <dt>Lane</dt>
            <dd>{trace.lanes[chosen.lane]?.label}</dd>
            <dt>Start</dt>
            <dd data-field="start">{formatMicros(chosen.start)} from the trace&apos;s start</dd>
            <dt>Duration</dt>
            <dd data-field="duration" data-us={chosen.duration}>
              {formatMicros(chosen.duration)}
            </dd>
            {Object.entries(chosen.args).map(([key, value]) => (
              <ArgRow key={key} name={key} value={value} />
            ))}
          </dl>
          <button
            type="button"
            onClick={() => setZoomed(zoomAt({ start: chosen.start, end: chosen.end }, 1.2, chosen.start, bounds))}
          >
            Zoom to this event
          </button>{' '}
          <button type="button" className="link" onClick={() => setSelected(null)}>
            Close
          </button>
        </section>
      )}
    </>
  );
}

function ArgRow({ name, value }: { name: string; value: unknown }) {
  return (
    <>
      <dt>{name}</dt>
      <dd>
        <code>{typeof value === 'string' ? value : JSON.stringify(value)}</code>
      </dd>
    </>
  );
}

interface Marks {
  matches: number[] | null;
  selected: number | null;
  drag: { from: number; to: number } | null;
}

function draw(canvas: HTMLCanvasElement, trace: Trace, layout: Layout, view: Viewport, height: number, marks: Marks) {
  const ratio = globalThis.devicePixelRatio || 1;
  canvas.width = Math.round(view.width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = `${view.width}px`;
  canvas.style.height = `${height}px`;
  const context = canvas.getContext('2d');
  if (!context) return;
  context.setTransform(ratio, 0, 0, ratio, 0, -view.top * ratio);
  context.clearRect(0, view.top, view.width, height);
  const palette = Array.from({ length: 8 }, (_, i) => cssColor(`--series-${i}`));
  const [soft, text, outline, accent] = [cssColor('--bg-soft'), cssColor('--bg'), cssColor('--fg'), cssColor('--accent')];

  layout.rows.forEach((row) => {
    context.fillStyle = soft;
    context.fillRect(0, row.top, view.width, row.height);
  });
  // With a search, what does not match fades, so that the matches stand out.
  context.globalAlpha = marks.matches ? 0.2 : 1;
  context.font = '11px system-ui, sans-serif';
  context.textBaseline = 'middle';
  for (const box of visibleBoxes(trace, layout, view)) {
    const slice = trace.slices[box.slice];
    if (!slice) continue;
    context.fillStyle = palette[colorSlot(slice.name)] ?? accent;
    context.fillRect(box.x, box.y + 1, box.width, ROW_HEIGHT - 2);
    if (box.width >= MIN_LABEL_PX && !marks.matches) label(context, slice.name, box.x, box.y, box.width, text);
  }
  context.globalAlpha = 1;
  if (marks.matches) {
    for (const index of marks.matches) {
      const box = boxOf(trace, layout, view, index);
      const slice = trace.slices[index];
      if (!box || !slice) continue;
      context.fillStyle = palette[colorSlot(slice.name)] ?? accent;
      context.fillRect(box.x, box.y + 1, box.width, ROW_HEIGHT - 2);
      context.strokeStyle = outline;
      context.lineWidth = 1;
      context.strokeRect(box.x + 0.5, box.y + 1.5, Math.max(0, box.width - 1), ROW_HEIGHT - 3);
      if (box.width >= MIN_LABEL_PX) label(context, slice.name, box.x, box.y, box.width, text);
    }
  }
  const chosen = marks.selected === null ? null : boxOf(trace, layout, view, marks.selected);
  if (chosen) {
    context.strokeStyle = outline;
    context.lineWidth = 2;
    context.strokeRect(chosen.x, chosen.y + 1, Math.max(2, chosen.width), ROW_HEIGHT - 2);
  }
  if (marks.drag) {
    context.fillStyle = accent;
    context.globalAlpha = 0.2;
    const left = Math.min(marks.drag.from, marks.drag.to);
    context.fillRect(left, view.top, Math.abs(marks.drag.to - marks.drag.from), height);
    context.globalAlpha = 1;
  }
}

function label(context: CanvasRenderingContext2D, name: string, x: number, y: number, width: number, color: string) {
  context.save();
  context.beginPath();
  context.rect(x, y, width, ROW_HEIGHT);
  context.clip();
  context.fillStyle = color;
  context.fillText(name, x + 4, y + ROW_HEIGHT / 2);
  context.restore();
}

// The trace page's arithmetic: a Chrome trace (torch.profiler's export_chrome_trace) read
// into lanes of nested slices, the visible time window and its pixel mapping, the boxes to
// draw, what lies under the pointer, and search. The page only draws and listens; every
// decision about where a slice goes is here, without the DOM, so it is tested in node.
//
// Times are microseconds from the trace's first event: the exported `ts` are absolute
// (about 1e12 us), which would waste a float's precision on every subtraction.

/** Categories of work on a device's stream rather than a CPU thread (as profile_summary). */
const DEVICE_CATEGORIES = new Set(['kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation']);

export interface Slice {
  name: string;
  category: string;
  /** From the trace's start, us. */
  start: number;
  duration: number;
  end: number;
  lane: number;
  /** 0 for a slice no other slice of its lane contains; one more per enclosing slice. */
  depth: number;
  args: Record<string, unknown>;
}

export interface Lane {
  label: string;
  kind: 'gpu' | 'cpu';
  /** How many nesting levels its slices use (rows it needs). */
  depths: number;
  /** Per depth, the indexes of its slices there, by start. */
  byDepth: number[][];
}

export interface Trace {
  slices: Slice[];
  lanes: Lane[];
  /** The end of the last slice: the trace spans [0, duration]. */
  duration: number;
}

export interface TimeWindow {
  start: number;
  end: number;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** A pid or tid as a key: torch writes numbers for threads and strings ("Spans") for some. */
function idOf(value: unknown): string {
  return typeof value === 'number' || typeof value === 'string' ? String(value) : '?';
}

/** Ids sort as numbers when both are, else as text. */
function compareIds(a: string, b: string): number {
  const [x, y] = [Number(a), Number(b)];
  if (a !== '' && b !== '' && Number.isFinite(x) && Number.isFinite(y)) return x - y;
  return a.localeCompare(b);
}

interface Names {
  process: Map<string, string>;
  processLabel: Map<string, string>;
  processOrder: Map<string, number>;
  thread: Map<string, string>;
  threadOrder: Map<string, number>;
}

function readMetadata(event: Record<string, unknown>, names: Names): void {
  const args = isRecord(event.args) ? event.args : {};
  const pid = idOf(event.pid);
  const thread = `${pid}/${idOf(event.tid)}`;
  if (event.name === 'process_name' && typeof args.name === 'string') names.process.set(pid, args.name);
  if (event.name === 'process_labels' && typeof args.labels === 'string') names.processLabel.set(pid, args.labels);
  if (event.name === 'process_sort_index' && finite(args.sort_index)) names.processOrder.set(pid, args.sort_index);
  if (event.name === 'thread_name' && typeof args.name === 'string') names.thread.set(thread, args.name.trim());
  if (event.name === 'thread_sort_index' && finite(args.sort_index)) names.threadOrder.set(thread, args.sort_index);
}

/** The complete events ("X") of an exported trace in lanes, one per pid/tid, named by the
 * metadata events ("M"); every other event is left out. Throws on a body that is no trace. */
export function parseTrace(raw: unknown): Trace {
  const events = isRecord(raw) ? raw.traceEvents : Array.isArray(raw) ? raw : undefined;
  if (!Array.isArray(events)) throw new Error('not a Chrome trace: it has no traceEvents list');
  const names: Names = {
    process: new Map(),
    processLabel: new Map(),
    processOrder: new Map(),
    thread: new Map(),
    threadOrder: new Map(),
  };
  const complete: { event: Record<string, unknown>; ts: number; dur: number; pid: string; tid: string }[] = [];
  let origin = Infinity;
  for (const event of events) {
    if (!isRecord(event)) continue;
    if (event.ph === 'M') readMetadata(event, names);
    if (event.ph !== 'X' || !finite(event.ts)) continue;
    const dur = finite(event.dur) ? Math.max(0, event.dur) : 0;
    complete.push({ event, ts: event.ts, dur, pid: idOf(event.pid), tid: idOf(event.tid) });
    origin = Math.min(origin, event.ts);
  }

  const laneOf = new Map<string, { pid: string; tid: string; slices: number[] }>();
  const slices: Slice[] = [];
  let duration = 0;
  for (const { event, ts, dur, pid, tid } of complete) {
    const key = `${pid}/${tid}`;
    let lane = laneOf.get(key);
    if (!lane) {
      lane = { pid, tid, slices: [] };
      laneOf.set(key, lane);
    }
    const start = ts - origin;
    lane.slices.push(slices.length);
    slices.push({
      name: typeof event.name === 'string' ? event.name : String(event.name ?? ''),
      category: typeof event.cat === 'string' ? event.cat : '',
      start,
      duration: dur,
      end: start + dur,
      lane: -1,
      depth: 0,
      args: isRecord(event.args) ? event.args : {},
    });
    duration = Math.max(duration, start + dur);
  }

  const order = (map: Map<string, number>, key: string) => map.get(key) ?? Infinity;
  const sorted = [...laneOf.entries()].sort(([keyA, a], [keyB, b]) => {
    const byProcess = order(names.processOrder, a.pid) - order(names.processOrder, b.pid);
    if (byProcess) return byProcess;
    const byPid = compareIds(a.pid, b.pid);
    if (byPid) return byPid;
    const byThread = order(names.threadOrder, keyA) - order(names.threadOrder, keyB);
    return byThread || compareIds(a.tid, b.tid);
  });
  const lanes = sorted.map(([key, { pid, tid, slices: members }], index): Lane => {
    // An id that is a name already (torch's "Spans" / "PyTorch Profiler") stands as it is.
    const process = names.processLabel.get(pid) ?? names.process.get(pid) ?? (/^\d+$/.test(pid) ? `process ${pid}` : pid);
    const thread = names.thread.get(key) ?? (/^\d+$/.test(tid) ? `thread ${tid}` : tid);
    for (const i of members) (slices[i] as Slice).lane = index;
    const byDepth = nest(slices, members);
    const gpu = members.some((i) => DEVICE_CATEGORIES.has((slices[i] as Slice).category));
    return { label: `${process} · ${thread}`, kind: gpu ? 'gpu' : 'cpu', depths: byDepth.length, byDepth };
  });
  return { slices, lanes, duration };
}

/** Sets each slice's depth from interval containment within its lane: a slice that starts
 * inside another, the longer first on a tie, is one deeper. A slice that starts inside
 * another but ends after it (clock jitter) still goes one deeper, overlapping nothing there. */
function nest(slices: Slice[], members: number[]): number[][] {
  const ordered = [...members].sort((a, b) => {
    const [x, y] = [slices[a] as Slice, slices[b] as Slice];
    return x.start - y.start || y.duration - x.duration;
  });
  const open: number[] = []; // ends of the slices enclosing the current one
  const byDepth: number[][] = [];
  for (const index of ordered) {
    const slice = slices[index] as Slice;
    while (open.length > 0 && (open[open.length - 1] as number) <= slice.start) open.pop();
    slice.depth = open.length;
    open.push(slice.end);
    (byDepth[slice.depth] ??= []).push(index);
  }
  return byDepth;
}

// The window: a span of trace time laid across `width` pixels.

/** The narrowest window: below a tenth of a microsecond the profiler's clock says nothing. */
export const MIN_SPAN_US = 0.1;

export function fullWindow(trace: Trace): TimeWindow {
  return { start: 0, end: Math.max(trace.duration, MIN_SPAN_US) };
}

export function xAt(time: number, window: TimeWindow, width: number): number {
  return ((time - window.start) / (window.end - window.start)) * width;
}

export function timeAt(x: number, window: TimeWindow, width: number): number {
  return window.start + (x / width) * (window.end - window.start);
}

/** `window` kept inside `bounds`, at least MIN_SPAN_US wide and at most as wide as them. */
export function clampWindow(window: TimeWindow, bounds: TimeWindow): TimeWindow {
  const limit = bounds.end - bounds.start;
  const span = Math.min(limit, Math.max(MIN_SPAN_US, window.end - window.start));
  const start = Math.min(Math.max(window.start, bounds.start), bounds.end - span);
  return { start, end: start + span };
}

/** Zoomed by `factor` (below 1 zooms in) about `anchor`, which stays where it is on screen. */
export function zoomAt(window: TimeWindow, factor: number, anchor: number, bounds: TimeWindow): TimeWindow {
  const start = anchor - (anchor - window.start) * factor;
  const end = anchor + (window.end - anchor) * factor;
  if (end - start < MIN_SPAN_US) {
    // Already at the narrowest: stay put rather than drift as the clamp re-centres.
    const centre = Math.min(Math.max(anchor, window.start), window.end);
    return clampWindow({ start: centre - MIN_SPAN_US / 2, end: centre + MIN_SPAN_US / 2 }, bounds);
  }
  return clampWindow({ start, end }, bounds);
}

export function panBy(window: TimeWindow, delta: number, bounds: TimeWindow): TimeWindow {
  return clampWindow({ start: window.start + delta, end: window.end + delta }, bounds);
}

/** A drag shorter than this is a click. */
export const MIN_DRAG_PX = 4;

/** The window a drag from `x0` to `x1` selects, or null for a drag too short to mean one. */
export function windowBetween(
  x0: number,
  x1: number,
  window: TimeWindow,
  width: number,
  bounds: TimeWindow,
): TimeWindow | null {
  if (Math.abs(x1 - x0) < MIN_DRAG_PX) return null;
  const [left, right] = [Math.max(0, Math.min(x0, x1)), Math.min(width, Math.max(x0, x1))];
  return clampWindow({ start: timeAt(left, window, width), end: timeAt(right, window, width) }, bounds);
}

// Lanes stacked top to bottom, a row per nesting level.

export const ROW_HEIGHT = 18;
export const LANE_GAP = 10;

export interface LaneRow {
  top: number;
  height: number;
}

export interface Layout {
  rows: LaneRow[];
  height: number;
}

export function layoutLanes(lanes: Lane[]): Layout {
  let top = 0;
  const rows = lanes.map((lane) => {
    const row = { top, height: Math.max(1, lane.depths) * ROW_HEIGHT };
    top += row.height + LANE_GAP;
    return row;
  });
  return { rows, height: Math.max(top - LANE_GAP, 0) };
}

export interface Box {
  slice: number;
  x: number;
  y: number;
  width: number;
}

export interface Viewport {
  window: TimeWindow;
  width: number;
  /** The vertical range of the layout in view, in layout pixels. */
  top: number;
  bottom: number;
}

/** The first index of `indexes` (slices by start) whose slice may reach past `time`. */
function firstReaching(slices: Slice[], indexes: number[], time: number): number {
  let [low, high] = [0, indexes.length];
  while (low < high) {
    const middle = (low + high) >> 1;
    if ((slices[indexes[middle] as number] as Slice).start < time) low = middle + 1;
    else high = middle;
  }
  // Slices of one depth do not overlap, so only those just before can still be open.
  while (low > 0 && (slices[indexes[low - 1] as number] as Slice).end > time) low -= 1;
  return low;
}

/** The boxes to draw for what is in view, at least a pixel wide. Within a row, a slice that
 * would land wholly on pixels already drawn is left out: at a wide zoom thousands of slices
 * share a few pixels, and drawing each would cost far more than it shows. */
export function visibleBoxes(trace: Trace, layout: Layout, view: Viewport): Box[] {
  const boxes: Box[] = [];
  const { window, width } = view;
  trace.lanes.forEach((lane, laneIndex) => {
    const row = layout.rows[laneIndex] as LaneRow;
    lane.byDepth.forEach((indexes, depth) => {
      const y = row.top + depth * ROW_HEIGHT;
      if (y + ROW_HEIGHT < view.top || y > view.bottom) return;
      let drawnTo = -Infinity;
      for (let i = firstReaching(trace.slices, indexes, window.start); i < indexes.length; i += 1) {
        const index = indexes[i] as number;
        const slice = trace.slices[index] as Slice;
        if (slice.start > window.end) break;
        if (slice.end < window.start) continue;
        const left = Math.max(0, xAt(slice.start, window, width));
        const right = Math.min(width, xAt(slice.end, window, width));
        const x = Math.floor(left);
        const boxWidth = Math.max(1, right - x);
        if (x + boxWidth <= drawnTo) continue;
        boxes.push({ slice: index, x, y, width: boxWidth });
        drawnTo = Math.max(drawnTo, Math.ceil(x + boxWidth));
      }
    });
  });
  return boxes;
}

/** The box of one slice, for outlining it (a search match, the selection); null when out of
 * view. */
export function boxOf(trace: Trace, layout: Layout, view: Viewport, index: number): Box | null {
  const slice = trace.slices[index];
  if (!slice || slice.end < view.window.start || slice.start > view.window.end) return null;
  const y = (layout.rows[slice.lane] as LaneRow).top + slice.depth * ROW_HEIGHT;
  if (y + ROW_HEIGHT < view.top || y > view.bottom) return null;
  const left = Math.max(0, xAt(slice.start, view.window, view.width));
  const right = Math.min(view.width, xAt(slice.end, view.window, view.width));
  return { slice: index, x: Math.floor(left), y, width: Math.max(1, right - Math.floor(left)) };
}

/** How near, in pixels, a pointer must be to a slice narrower than a pixel or two to pick it. */
export const HIT_SLOP_PX = 3;

/** The slice under the point (x in the canvas, y in the layout), or the nearest one within
 * HIT_SLOP_PX on its row; null over empty space. */
export function hitTest(trace: Trace, layout: Layout, view: Viewport, x: number, y: number): number | null {
  const laneIndex = layout.rows.findIndex((row) => y >= row.top && y < row.top + row.height);
  const lane = trace.lanes[laneIndex];
  if (!lane) return null;
  const depth = Math.floor((y - (layout.rows[laneIndex] as LaneRow).top) / ROW_HEIGHT);
  const indexes = lane.byDepth[depth];
  if (!indexes) return null;
  const time = timeAt(x, view.window, view.width);
  const slop = (HIT_SLOP_PX / view.width) * (view.window.end - view.window.start);
  let best: number | null = null;
  let bestGap = Infinity;
  for (let i = firstReaching(trace.slices, indexes, time - slop); i < indexes.length; i += 1) {
    const index = indexes[i] as number;
    const slice = trace.slices[index] as Slice;
    if (slice.start > time + slop) break;
    const gap = time < slice.start ? slice.start - time : time > slice.end ? time - slice.end : 0;
    if (gap < bestGap) [best, bestGap] = [index, gap];
    if (gap === 0) break;
  }
  return bestGap <= slop ? best : null;
}

/** The slices whose name holds `query` (ignoring case), by start; none for a blank query. */
export function searchSlices(trace: Trace, query: string): number[] {
  const needle = query.trim().toLowerCase();
  if (!needle) return [];
  const found: number[] = [];
  trace.slices.forEach((slice, index) => {
    if (slice.name.toLowerCase().includes(needle)) found.push(index);
  });
  return found.sort((a, b) => (trace.slices[a] as Slice).start - (trace.slices[b] as Slice).start);
}

// The time axis.

const UNITS: [number, string][] = [
  [1e6, 's'],
  [1e3, 'ms'],
  [1, 'µs'],
  [1e-3, 'ns'],
];

/** "12.5 ms", "840 µs", "3 ns": a time in microseconds, to three significant digits. */
export function formatMicros(us: number): string {
  const size = Math.abs(us);
  if (size === 0) return '0 µs';
  const [scale, unit] = UNITS.find(([scale]) => size >= scale) ?? (UNITS[UNITS.length - 1] as [number, string]);
  return `${Number((us / scale).toPrecision(3))} ${unit}`;
}

export interface Tick {
  time: number;
  x: number;
  label: string;
}

/** Ticks at a round step (1, 2 or 5 times a power of ten) at least `spacing` pixels apart,
 * labelled in the unit of the window's end (so "1.230 ms", not "1230 µs") with as many
 * decimals as the step needs. */
export function timeTicks(window: TimeWindow, width: number, spacing = 90): Tick[] {
  const span = window.end - window.start;
  if (!(width > 0) || !(span > 0)) return [];
  const rough = (span * spacing) / width;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = ([1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? 10 * power) as number;
  const [scale, unit] =
    UNITS.find(([scale]) => Math.max(window.end, step) >= scale) ?? (UNITS[UNITS.length - 1] as [number, string]);
  const decimals = Math.max(0, -Math.floor(Math.log10(step / scale) + 1e-9));
  const ticks: Tick[] = [];
  // Each tick from its own multiple: adding the step up would carry its rounding along.
  for (let n = Math.ceil(window.start / step - 1e-9); n * step <= window.end + step * 1e-9; n += 1) {
    const time = n * step;
    ticks.push({ time, x: xAt(time, window, width), label: `${(time / scale).toFixed(decimals)} ${unit}` });
  }
  return ticks;
}

/** A colour slot (0-7, the theme's --series-N) for a slice: the same name, the same colour. */
export function colorSlot(name: string): number {
  let hash = 0;
  for (let i = 0; i < name.length; i += 1) hash = (hash * 31 + name.charCodeAt(i)) | 0;
  return Math.abs(hash) % 8;
}

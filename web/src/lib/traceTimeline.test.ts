import { describe, expect, it } from 'vitest';

import {
  boxOf,
  clampWindow,
  colorSlot,
  formatMicros,
  fullWindow,
  hitTest,
  LANE_GAP,
  layoutLanes,
  MIN_SPAN_US,
  panBy,
  parseTrace,
  ROW_HEIGHT,
  searchSlices,
  timeAt,
  timeTicks,
  visibleBoxes,
  windowBetween,
  xAt,
  zoomAt,
  type Viewport,
} from './traceTimeline';

const T0 = 5_655_050_088_000; // torch writes absolute microseconds

function x(name: string, ts: number, dur: number, pid: number | string, tid: number | string, cat = 'cpu_op') {
  return { ph: 'X', cat, name, ts: T0 + ts, dur, pid, tid, args: { 'External id': ts } };
}

// One CPU thread (a step: an annotation around a linear around an addmm, then the optimizer)
// and one GPU stream, named as torch names them; plus events the timeline ignores.
const TRACE = {
  schemaVersion: 1,
  traceEvents: [
    { ph: 'M', name: 'process_name', pid: 100, tid: 0, args: { name: 'python' } },
    { ph: 'M', name: 'process_labels', pid: 100, tid: 0, args: { labels: 'CPU' } },
    { ph: 'M', name: 'thread_name', pid: 100, tid: 100, args: { name: 'thread 100 (python)' } },
    { ph: 'M', name: 'process_name', pid: 0, tid: 0, args: { name: 'python' } },
    { ph: 'M', name: 'process_labels', pid: 0, tid: 0, args: { labels: 'GPU 0' } },
    { ph: 'M', name: 'process_sort_index', pid: 0, tid: 0, args: { sort_index: 5 } },
    { ph: 'M', name: 'process_sort_index', pid: 100, tid: 0, args: { sort_index: 1 } },
    { ph: 'M', name: 'thread_name', pid: 0, tid: 7, args: { name: 'stream 7 ' } },
    x('crucible/forward_backward', 0, 100, 100, 100, 'user_annotation'),
    x('aten::addmm', 20, 30, 100, 100), // inside the linear, listed first
    x('aten::linear', 10, 50, 100, 100),
    x('crucible/optimizer', 100, 40, 100, 100, 'user_annotation'), // starts as the step ends
    x('gemm_kernel', 30, 25, 0, 7, 'kernel'),
    x('Memcpy HtoD', 60, 5, 0, 7, 'gpu_memcpy'),
    { ph: 's', cat: 'fwdbwd', name: 'fwdbwd', ts: T0 + 10, pid: 100, tid: 100, id: 1 },
    { ph: 'i', name: 'instant', ts: T0 + 5, pid: 100, tid: 100 },
    { ph: 'X', name: 'no time', pid: 100, tid: 100 },
    'not an event',
  ],
};

describe('parseTrace', () => {
  const trace = parseTrace(TRACE);

  it('keeps the complete events only, in time from the first', () => {
    expect(trace.slices.map((s) => s.name).sort()).toEqual(
      ['Memcpy HtoD', 'aten::addmm', 'aten::linear', 'crucible/forward_backward', 'crucible/optimizer', 'gemm_kernel'].sort(),
    );
    const addmm = trace.slices.find((s) => s.name === 'aten::addmm');
    expect(addmm).toMatchObject({ category: 'cpu_op', start: 20, duration: 30, end: 50, args: { 'External id': 20 } });
    expect(trace.duration).toBe(140);
  });

  it('makes a lane per thread and stream, named by the metadata and in its sort order', () => {
    expect(trace.lanes.map((l) => [l.label, l.kind, l.depths])).toEqual([
      ['CPU · thread 100 (python)', 'cpu', 3],
      ['GPU 0 · stream 7', 'gpu', 1],
    ]);
  });

  it('nests slices by containment, whatever order they came in', () => {
    const depth = Object.fromEntries(trace.slices.map((s) => [s.name, [s.lane, s.depth]]));
    expect(depth).toEqual({
      'crucible/forward_backward': [0, 0],
      'aten::linear': [0, 1],
      'aten::addmm': [0, 2],
      'crucible/optimizer': [0, 0], // touching the step's end is not inside it
      gemm_kernel: [1, 0],
      'Memcpy HtoD': [1, 0],
    });
    const cpu = trace.lanes[0];
    expect(cpu?.byDepth[0]?.map((i) => trace.slices[i]?.name)).toEqual(['crucible/forward_backward', 'crucible/optimizer']);
  });

  it('names a lane without metadata by its ids, and refuses what is no trace', () => {
    const bare = parseTrace([x('op', 0, 1, 'Spans', 'PyTorch Profiler', 'Trace')]);
    expect(bare.lanes.map((l) => l.label)).toEqual(['Spans · PyTorch Profiler']);
    expect(() => parseTrace({ events: [] })).toThrow(/no traceEvents/);
    expect(parseTrace({ traceEvents: [] })).toEqual({ slices: [], lanes: [], duration: 0 });
  });

  it('orders lanes without sort indexes by their ids, numbers as numbers', () => {
    const lanes = parseTrace([x('a', 0, 1, 1, 10), x('b', 0, 1, 1, 9), x('c', 0, 1, 'Spans', 1)]).lanes;
    expect(lanes.map((l) => l.label)).toEqual(['process 1 · thread 9', 'process 1 · thread 10', 'Spans · thread 1']);
  });
});

describe('the window', () => {
  const bounds = { start: 0, end: 1000 };

  it('maps time to pixels and back', () => {
    const window = { start: 100, end: 300 };
    expect(xAt(200, window, 800)).toBe(400);
    expect(timeAt(400, window, 800)).toBe(200);
    expect(xAt(100, window, 800)).toBe(0);
  });

  it('zooms about the anchor, which keeps its place on screen', () => {
    const window = { start: 0, end: 1000 };
    const zoomed = zoomAt(window, 0.5, 250, bounds);
    expect(zoomed).toEqual({ start: 125, end: 625 });
    expect(xAt(250, zoomed, 1000)).toBe(xAt(250, window, 1000));
    expect(zoomAt(zoomed, 2, 250, bounds)).toEqual(window);
  });

  it('never zooms out past the trace nor in below the narrowest span', () => {
    expect(zoomAt({ start: 0, end: 1000 }, 4, 500, bounds)).toEqual(bounds);
    const narrow = zoomAt({ start: 500, end: 500.1 }, 0.01, 500.05, bounds);
    expect(narrow.end - narrow.start).toBeCloseTo(MIN_SPAN_US);
    expect(narrow.start).toBeCloseTo(500);
  });

  it('pans within the trace', () => {
    expect(panBy({ start: 100, end: 200 }, 50, bounds)).toEqual({ start: 150, end: 250 });
    expect(panBy({ start: 100, end: 200 }, -500, bounds)).toEqual({ start: 0, end: 100 });
    expect(panBy({ start: 800, end: 900 }, 500, bounds)).toEqual({ start: 900, end: 1000 });
    expect(clampWindow({ start: -5, end: 2000 }, bounds)).toEqual(bounds);
  });

  it('turns a drag into the window between its ends, and a short one into none', () => {
    const window = { start: 0, end: 1000 };
    expect(windowBetween(600, 200, window, 1000, bounds)).toEqual({ start: 200, end: 600 });
    expect(windowBetween(-50, 100, window, 1000, bounds)).toEqual({ start: 0, end: 100 });
    expect(windowBetween(200, 202, window, 1000, bounds)).toBeNull();
  });
});

describe('drawing and picking', () => {
  const trace = parseTrace(TRACE);
  const layout = layoutLanes(trace.lanes);
  const view: Viewport = { window: fullWindow(trace), width: 1400, top: 0, bottom: layout.height };

  it('stacks the lanes, a row per depth', () => {
    expect(layout.rows).toEqual([
      { top: 0, height: 3 * ROW_HEIGHT },
      { top: 3 * ROW_HEIGHT + LANE_GAP, height: ROW_HEIGHT },
    ]);
    expect(layout.height).toBe(4 * ROW_HEIGHT + LANE_GAP);
  });

  it('places each slice in view at its time and depth', () => {
    const boxes = visibleBoxes(trace, layout, view);
    const byName = Object.fromEntries(boxes.map((b) => [trace.slices[b.slice]?.name, [b.x, b.y, b.width]]));
    expect(byName).toEqual({
      'crucible/forward_backward': [0, 0, 1000],
      'aten::linear': [100, ROW_HEIGHT, 500],
      'aten::addmm': [200, 2 * ROW_HEIGHT, 300],
      'crucible/optimizer': [1000, 0, 400],
      gemm_kernel: [300, layout.rows[1]?.top, 250],
      'Memcpy HtoD': [600, layout.rows[1]?.top, 50],
    });
  });

  it('leaves out what is outside the window or the rows in view', () => {
    const late = { ...view, window: { start: 55, end: 125 } };
    const names = visibleBoxes(trace, layout, late).map((b) => trace.slices[b.slice]?.name);
    expect(names.sort()).toEqual(['Memcpy HtoD', 'aten::linear', 'crucible/forward_backward', 'crucible/optimizer']);
    const cpuOnly = { ...view, bottom: 2 * ROW_HEIGHT };
    expect(visibleBoxes(trace, layout, cpuOnly).map((b) => trace.slices[b.slice]?.lane)).not.toContain(1);
  });

  it('draws thousands of slices sharing a pixel once, and a tiny one a pixel wide', () => {
    const events = Array.from({ length: 5000 }, (_, i) => x(`op${i}`, i * 0.2, 0.1, 1, 1));
    const dense = parseTrace(events);
    const denseView: Viewport = { window: fullWindow(dense), width: 100, top: 0, bottom: 100 };
    const boxes = visibleBoxes(dense, layoutLanes(dense.lanes), denseView);
    expect(boxes.length).toBeLessThanOrEqual(100);
    expect(boxes.every((b) => b.width >= 1)).toBe(true);
    expect(boxes[0]?.x).toBe(0);
    expect(boxes.at(-1)?.x).toBe(99);
  });

  it('finds the slice under the pointer, the deepest row it points at', () => {
    const name = (hit: number | null) => (hit === null ? null : trace.slices[hit]?.name);
    expect(name(hitTest(trace, layout, view, 250, 2 * ROW_HEIGHT + 5))).toBe('aten::addmm');
    expect(name(hitTest(trace, layout, view, 250, ROW_HEIGHT + 5))).toBe('aten::linear');
    expect(name(hitTest(trace, layout, view, 1200, 5))).toBe('crucible/optimizer');
    expect(name(hitTest(trace, layout, view, 50, ROW_HEIGHT + 5))).toBeNull(); // before the linear
    expect(name(hitTest(trace, layout, view, 1200, ROW_HEIGHT + 5))).toBeNull(); // no depth 1 there
    expect(name(hitTest(trace, layout, view, 300, 3 * ROW_HEIGHT + 2))).toBeNull(); // the gap between lanes
    expect(name(hitTest(trace, layout, view, 652, (layout.rows[1]?.top ?? 0) + 5))).toBe('Memcpy HtoD'); // within slop
  });

  it('boxes one slice for an outline, or none out of view', () => {
    const addmm = trace.slices.findIndex((s) => s.name === 'aten::addmm');
    expect(boxOf(trace, layout, view, addmm)).toEqual({ slice: addmm, x: 200, y: 2 * ROW_HEIGHT, width: 300 });
    expect(boxOf(trace, layout, { ...view, window: { start: 60, end: 140 } }, addmm)).toBeNull();
  });

  it('searches names without regard to case, by start', () => {
    const found = searchSlices(trace, ' ATEN:: ').map((i) => trace.slices[i]?.name);
    expect(found).toEqual(['aten::linear', 'aten::addmm']);
    expect(searchSlices(trace, '   ')).toEqual([]);
    expect(searchSlices(trace, 'nothing like it')).toEqual([]);
  });
});

describe('the axis', () => {
  it('formats microseconds in the unit that reads best', () => {
    expect(formatMicros(0)).toBe('0 µs');
    expect(formatMicros(0.25)).toBe('250 ns');
    expect(formatMicros(840)).toBe('840 µs');
    expect(formatMicros(12_345)).toBe('12.3 ms');
    expect(formatMicros(2_500_000)).toBe('2.5 s');
  });

  it('ticks at round steps, at least the spacing apart', () => {
    const ticks = timeTicks({ start: 0, end: 1000 }, 1000, 90);
    expect(ticks.map((t) => t.label)).toEqual(['0.0 ms', '0.1 ms', '0.2 ms', '0.3 ms', '0.4 ms', '0.5 ms', '0.6 ms', '0.7 ms', '0.8 ms', '0.9 ms', '1.0 ms']);
    const fine = timeTicks({ start: 1230, end: 1236 }, 600, 90);
    expect(fine.map((t) => t.label)).toEqual(['1.230 ms', '1.231 ms', '1.232 ms', '1.233 ms', '1.234 ms', '1.235 ms', '1.236 ms']);
    expect(fine[1]?.x).toBeCloseTo(100);
    expect(timeTicks({ start: 0, end: 40 }, 400, 90).map((t) => t.label)).toEqual(['0 µs', '10 µs', '20 µs', '30 µs', '40 µs']);
    expect(timeTicks({ start: 0, end: 0 }, 600)).toEqual([]);
  });

  it('colours a name the same way every time', () => {
    expect(colorSlot('aten::mm')).toBe(colorSlot('aten::mm'));
    expect(new Set(['a', 'b', 'c', 'd', 'e', 'f'].map(colorSlot)).size).toBeGreaterThan(1);
    expect(colorSlot('aten::mm')).toBeGreaterThanOrEqual(0);
    expect(colorSlot('aten::mm')).toBeLessThan(8);
  });
});

/** Rows [start, end) to render for a scroll position, with `overscan` extra on each side. */
export function visibleRows(
  scrollTop: number,
  viewportHeight: number,
  rowHeight: number,
  count: number,
  overscan = 10,
): { start: number; end: number } {
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const shown = Math.ceil(viewportHeight / rowHeight);
  return {
    start: Math.max(0, Math.min(count, first - overscan)),
    end: Math.min(count, first + shown + overscan),
  };
}

/** Ask the server for the next page once the rendered rows come within `margin` of the end. */
export function needsMore(end: number, loaded: number, margin = 20): boolean {
  return loaded - end <= margin;
}

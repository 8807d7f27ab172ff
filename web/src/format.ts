const UNITS: [number, string][] = [
  [86400, 'd'],
  [3600, 'h'],
  [60, 'm'],
];

/** "3d", "5h", "12m", "40s": how long ago `iso` was, relative to `now`. */
export function age(iso: string, now: number = Date.now()): string {
  const seconds = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
  for (const [size, unit] of UNITS) {
    if (seconds >= size) return `${Math.floor(seconds / size)}${unit}`;
  }
  return `${seconds}s`;
}

export function dateTime(iso: string | null | undefined): string {
  return iso ? new Date(iso).toLocaleString() : '—';
}

export function orDash(value: number | string | null | undefined): string {
  return value === null || value === undefined || value === '' ? '—' : String(value);
}

/** "1h 02m", "4m 05s", "12s": a span of seconds for people. */
export function duration(seconds: number): string {
  const s = Math.round(Math.max(0, seconds));
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${s}s`;
}

export function percent(fraction: number | null | undefined): string {
  return fraction === null || fraction === undefined ? '—' : `${(fraction * 100).toFixed(1)}%`;
}

/** "1.2 GB": a byte count in decimal units, as storage is billed. */
export function bytes(count: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = count;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** A score with four significant digits, as the lineage labels show it. */
export function score(value: number | undefined): string {
  return value === undefined ? '—' : Number(value.toPrecision(4)).toString();
}

const SI: [number, string][] = [
  [1e15, 'P'],
  [1e12, 'T'],
  [1e9, 'G'],
  [1e6, 'M'],
  [1e3, 'k'],
];

/** A chart's axis label, short enough for the axis's width at any magnitude: "80T" for
 * FLOP/s, "3e-4" for a learning rate, "0.25" and "1.5k" between. */
export function tickLabel(value: number): string {
  if (value === 0 || !Number.isFinite(value)) return String(value);
  const size = Math.abs(value);
  for (const [scale, suffix] of SI) {
    if (size >= scale) return `${Number((value / scale).toPrecision(3))}${suffix}`;
  }
  if (size < 1e-2) {
    const [mantissa, exponent] = value.toExponential(1).split('e');
    return `${Number(mantissa)}e${Number(exponent)}`;
  }
  return String(Number(value.toPrecision(3)));
}

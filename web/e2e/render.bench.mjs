// Time to first render of the runs table and of a run's chart in headless Chromium, for
// benchmarks/dashboard_render.py (which seeds the server). Prints one JSON line of timings (ms).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`set ${name}`);
  return value;
};
const baseUrl = env('BASE_URL');
const token = env('TOKEN');
const runId = env('RUN_ID');
const experimentId = env('EXPERIMENT_ID');
const repeat = Number(env('REPEAT', '5'));

const profile = mkdtempSync(join(tmpdir(), 'crucible-bench-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env('CHROMIUM', '/usr/bin/chromium'),
  viewport: { width: 1280, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
});
// Signed in before any script of the page runs, as after the sign-in form.
await context.addInitScript((value) => sessionStorage.setItem('crucible.token', value), token);

const firstRow = '[aria-label="Runs"] tbody tr:not(.spacer-row)';
const chart = '[data-testid="chart-train/loss"] canvas';

// A canvas uPlot has drawn on: any pixel not transparent.
const inked = (selector) =>
  `(() => { const c = document.querySelector('${selector}'); if (!c) return false;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 16) if (d[i] > 0) return true; return false; })()`;

const timings = { table_cold: [], table_warm: [], chart_cold: [], chart_warm: [] };
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(30_000);
  // In-app navigation: the app is loaded, but nothing of the target page is in its cache.
  async function navigate(hash, ready) {
    const started = await page.evaluate((to) => {
      const now = performance.now();
      globalThis.location.hash = to;
      return now;
    }, hash);
    await ready();
    return (await page.evaluate(() => performance.now())) - started;
  }
  const tableDrawn = () => page.waitForSelector(firstRow);
  const chartDrawn = () => page.waitForFunction(inked(chart), null, { polling: 'raf' });

  for (let turn = 0; turn < repeat; turn += 1) {
    // Cold: a full page load, timed from navigation start (where performance.now() starts).
    await page.goto('about:blank');
    await page.goto(`${baseUrl}/#/experiments/${experimentId}`);
    await tableDrawn();
    timings.table_cold.push(await page.evaluate(() => performance.now()));
    timings.chart_warm.push(await navigate(`/runs/${runId}`, chartDrawn));

    await page.goto('about:blank');
    await page.goto(`${baseUrl}/#/runs/${runId}`);
    await chartDrawn();
    timings.chart_cold.push(await page.evaluate(() => performance.now()));
    timings.table_warm.push(await navigate(`/experiments/${experimentId}`, tableDrawn));
  }
  console.log(JSON.stringify(timings));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

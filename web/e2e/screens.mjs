// Screenshots of dashboard pages of a server that already holds the runs to show (the
// H200 runs of benchmarks/gpu/research_bench.py, served from their packed home): signs in
// with TOKEN, then for each "hash=file.png" in PAGES opens BASE_URL/#hash, waits for WAIT_FOR
// (text on every page, e.g. a section's heading) and the network to settle, and saves a
// screenshot in SCREENSHOT_DIR: the whole page, or with FULL_PAGE=0 the first HEIGHT pixels
// (1000 by default), or with SECTION set only the page's section that heading labels (e.g.
// SECTION=Numerics).
//
//   BASE_URL=http://127.0.0.1:8000 TOKEN=... CHROMIUM=/usr/bin/chromium SCREENSHOT_DIR=docs/screenshots \
//   PAGES='/runs/1=h200-run.png /sweeps/1=h200-sweep.png' node e2e/screens.mjs
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const { BASE_URL, TOKEN, CHROMIUM, SCREENSHOT_DIR, PAGES, SECTION, FULL_PAGE = '1', HEIGHT = '1000' } =
  process.env;

const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  viewport: { width: 1280, height: Number(HEIGHT) },
  deviceScaleFactor: 1,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
});
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(30_000);
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
page.on('response', (r) => {
  if (r.status() >= 400) problems.push(`${r.status()} ${new URL(r.url()).pathname}`);
});
try {
  await page.goto(`${BASE_URL}/#/signin`);
  await page.getByLabel('API token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Projects' }).waitFor();
  for (const entry of PAGES.trim().split(/\s+/)) {
    const [hash, file] = entry.split('=');
    await page.goto(`${BASE_URL}/#${hash}`);
    await page.waitForLoadState('networkidle');
    await page.waitForTimeout(1500); // charts draw after their data arrives
    const path = join(SCREENSHOT_DIR, file);
    if (SECTION) {
      await page.getByRole('region', { name: SECTION, exact: true }).screenshot({ path });
    } else {
      await page.screenshot({ path, fullPage: FULL_PAGE !== '0' });
    }
    console.log(`saved ${file} of #${hash}`);
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}

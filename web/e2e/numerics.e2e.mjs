// The run page of a low-precision run: an emulated (mxfp8) run's Numerics section (the
// saturation warning, the worst-share and GEMM error charts beside the loss, the amax history,
// the table by layer), an fp8 run's (the amax and scale table, the GEMM error and scale drift
// charts), a block-scaled fp8 run's (no scales), and that none draws a chart per layer among
// the ordinary metrics. Prints one JSON line of what the pages showed;
// tests/browser/test_numerics_panel.py seeds the server and checks it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const { BASE_URL, TOKEN, EMULATED_RUN_ID, FP8_RUN_ID, FP8_BLOCK_RUN_ID, PLAIN_RUN_ID, CHROMIUM, SCREENSHOT_DIR } =
  process.env;
const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  viewport: { width: 1280, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
});

/** Painted pixels of a chart's canvas: a line was drawn. */
async function ink(page, testId) {
  const canvas = page.locator(`[data-testid="${testId}"] canvas`);
  await canvas.waitFor();
  await page.waitForTimeout(300); // uPlot draws on the frame after its data arrives
  return canvas.evaluate((element) => {
    const { data } = element.getContext('2d').getImageData(0, 0, element.width, element.height);
    let painted = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted += 1;
    return painted;
  });
}

async function headerRows(table) {
  return table
    .locator('thead tr')
    .evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((cell) => cell.textContent)));
}

/** The caption of the figure that holds a chart. */
async function caption(section, testId) {
  const chart = section.page().locator(`[data-testid="${testId}"]`);
  return section.locator('figure', { has: chart }).locator('figcaption').textContent();
}

async function legend(page, testId) {
  return page.locator(`[data-testid="${testId}"] .u-legend .u-series .u-label`).allTextContents();
}

async function rows(table) {
  return table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((cell) => cell.textContent)));
}

/** Charts of the ordinary metrics section named after a per-layer key. */
async function perLayerCharts(page) {
  return page.locator('[data-testid^="chart-numerics/"], [data-testid^="chart-fp8/"]').count();
}

try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const problems = [];
  const chartRequests = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('response', (r) => r.status() >= 400 && problems.push(`${r.status()} ${r.url()}`));
  page.on('request', (request) => {
    const url = new URL(request.url());
    // The ordinary charts' request: the one at their detail (Run.tsx MAX_POINTS).
    if (url.pathname.endsWith('/metrics') && url.searchParams.get('max_points') === '2000') {
      chartRequests.push(url.searchParams.get('keys'));
    }
  });
  await page.goto(`${BASE_URL}/#/signin`);
  await page.getByLabel('API token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Projects' }).waitFor();

  // The emulated run.
  await page.goto(`${BASE_URL}/#/runs/${EMULATED_RUN_ID}`);
  const section = page.getByRole('region', { name: 'Numerics', exact: true });
  const shares = section.getByRole('table', { name: 'Saturated and underflow shares by layer' });
  await shares.waitFor();
  const warnings = await section.getByRole('list', { name: 'Saturation warnings' }).locator('li').allTextContents();
  const warningHeading = await section.locator('.numerics-warning strong').textContent();
  const header = await headerRows(shares);
  const shareRows = await rows(shares);
  const overCells = await shares.locator('td.over').allTextContents();
  const emulatedInk = {
    saturated: await ink(page, 'numerics-worst-saturated'),
    underflow: await ink(page, 'numerics-worst-underflow'),
    loss: await ink(page, 'numerics-loss'),
    error: await ink(page, 'numerics-matmul-error'),
    amax: await ink(page, 'numerics-amax'),
  };
  const worstCaption = await caption(section, 'numerics-worst-saturated');
  const errorCaption = await caption(section, 'numerics-matmul-error');
  const amaxLegend = await legend(page, 'numerics-amax');
  await page.locator('[data-testid="chart-loss"] canvas').waitFor();
  const emulatedPerLayerCharts = await perLayerCharts(page);
  const sectionOrder = await page.locator('main h2').allTextContents();
  // Keyboard: Tab reaches the table's scrolling region.
  const region = section.getByRole('region', { name: 'Latest shares by layer' });
  let tabbedToTable = false;
  await section.evaluate((element) => element.ownerDocument.activeElement?.blur());
  for (let i = 0; i < 80 && !tabbedToTable; i += 1) {
    await page.keyboard.press('Tab');
    tabbedToTable = await region.evaluate((element) => element === element.ownerDocument.activeElement);
  }
  await section.evaluate((element) => element.ownerDocument.activeElement?.blur());
  await section.screenshot({ path: join(SCREENSHOT_DIR, 'numerics.png') });
  await page.getByLabel('Theme').selectOption('dark');
  await page.waitForTimeout(300);
  await section.screenshot({ path: join(SCREENSHOT_DIR, 'numerics-dark.png') });
  await page.getByLabel('Theme').selectOption('light');
  const emulatedChartRequests = [...chartRequests];

  // The fp8 run.
  chartRequests.length = 0;
  await page.goto(`${BASE_URL}/#/runs/${FP8_RUN_ID}`);
  const fp8 = section.getByRole('table', { name: 'fp8 amax and scale by layer' });
  await fp8.waitFor();
  const fp8Header = await headerRows(fp8);
  const fp8Rows = await rows(fp8);
  const driftInk = await ink(page, 'fp8-scale-drift');
  const driftLegend = await legend(page, 'fp8-scale-drift');
  const fp8ErrorInk = await ink(page, 'numerics-matmul-error');
  const fp8LossInk = await ink(page, 'numerics-loss');
  await page.locator('[data-testid="chart-loss"] canvas').waitFor();
  const fp8PerLayerCharts = await perLayerCharts(page);
  const fp8Warnings = await section.getByRole('list', { name: 'Saturation warnings' }).count();
  await section.screenshot({ path: join(SCREENSHOT_DIR, 'numerics-fp8.png') });
  const fp8ChartRequests = [...chartRequests];

  // The block-scaled fp8 run: no scale anywhere, and nothing broken for the lack of it.
  await page.goto(`${BASE_URL}/#/runs/${FP8_BLOCK_RUN_ID}`);
  const block = section.getByRole('table', { name: 'fp8 amax by layer' });
  await block.waitFor();
  const blockHeading = await section.locator('#fp8-latest-heading').textContent();
  const blockHeader = await headerRows(block);
  const blockRows = await rows(block);
  const blockErrorInk = await ink(page, 'numerics-matmul-error');
  const blockLossInk = await ink(page, 'numerics-loss');
  const blockErrorCaption = await caption(section, 'numerics-matmul-error');
  await page.locator('[data-testid="chart-loss"] canvas').waitFor();
  const blockScaleCharts = await page.locator('[data-testid="fp8-scale-drift"]').count();
  await section.screenshot({ path: join(SCREENSHOT_DIR, 'numerics-fp8-block.png') });

  // A run with only a loss has no section.
  await page.goto(`${BASE_URL}/#/runs/${PLAIN_RUN_ID}`);
  await page.locator('[data-testid="chart-loss"] canvas').waitFor();
  await page.waitForTimeout(500);
  const plainSections = await page.getByRole('region', { name: 'Numerics', exact: true }).count();

  console.log(
    JSON.stringify({
      warnings,
      warningHeading,
      header,
      shareRows,
      overCells,
      emulatedInk,
      worstCaption,
      errorCaption,
      amaxLegend,
      emulatedPerLayerCharts,
      sectionOrder,
      tabbedToTable,
      emulatedChartRequests,
      fp8Header,
      fp8Rows,
      driftInk,
      driftLegend,
      fp8PerLayerCharts,
      fp8Warnings,
      fp8ChartRequests,
      fp8ErrorInk,
      fp8LossInk,
      blockHeading,
      blockHeader,
      blockRows,
      blockErrorInk,
      blockLossInk,
      blockErrorCaption,
      blockScaleCharts,
      plainSections,
      problems,
    }),
  );
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

// Drive the dashboard in Debian's Chromium: sign in, walk projects -> experiment -> run, and
// check what a user would see. tests/browser/test_dashboard.py seeds a server and runs this;
// by hand: BASE_URL=http://127.0.0.1:4173 TOKEN=cru_... RUN_NAME=... node e2e/dashboard.e2e.mjs
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
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
const runName = env('RUN_NAME');
const runId = env('RUN_ID');
const experimentName = env('EXPERIMENT_NAME', 'arithmetic');
const latestStep = env('LATEST_STEP', '');
const runPage = Number(env('RUN_PAGE', '1'));
const screenshots = env('SCREENSHOT_DIR', join(tmpdir(), 'crucible-screenshots'));
const executablePath = env('CHROMIUM', '/usr/bin/chromium');

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
  console.log(`ok - ${message}`);
}

mkdirSync(screenshots, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
// A fresh profile each time; Playwright takes it as userDataDir, not as a flag.
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  viewport: { width: 1280, height: 900 },
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});

const problems = [];
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const consoleText = [];
  page.on('console', (message) => consoleText.push(message.text()));
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('response', (response) => {
    if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`);
  });

  // Signed out, any page leads to the sign-in form.
  await page.goto(`${baseUrl}/#/runs/1`);
  await page.getByLabel('API token').waitFor();
  check(page.url().endsWith('#/signin'), 'a signed-out visitor is sent to the sign-in page');

  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Projects' }).waitFor();
  check(true, 'the token signs in and the projects page shows');

  await page.getByRole('link', { name: 'default', exact: true }).click();
  await page.getByRole('link', { name: experimentName, exact: true }).click();
  const table = page.getByRole('table', { name: 'Runs' });
  await table.waitFor();
  const headers = await table.locator('thead th').allInnerTexts();
  check(
    JSON.stringify(headers) ===
      JSON.stringify(['Name', 'Kind', 'Phase', 'Attempt', 'GPUs', 'Latest step', 'Age']),
    `the runs table has its columns (${headers.join(', ')})`,
  );
  const runLink = page.getByRole('link', { name: runName, exact: true });
  const row = table.locator('tbody tr').filter({ has: runLink });
  // Newest first: older runs are reached through the API's cursor, one page at a time.
  for (let turn = 1; turn < runPage; turn += 1) {
    check((await table.locator('tbody tr').count()) === 50, `page ${turn} holds 50 runs`);
    check((await row.count()) === 0, `${runName} is not on page ${turn}`);
    await page.getByRole('button', { name: 'Older →' }).click();
    await page.getByText(`Page ${turn + 1}`).waitFor();
  }
  await row.waitFor();
  const cells = await row.locator('td').allInnerTexts();
  check(cells[0] === runName && cells[1] === 'train', `the run is listed as ${cells.join(' | ')}`);
  check(cells[2] === 'Running' && cells[3] === '2', 'it shows its phase and attempt count');
  if (latestStep) check(cells[5] === latestStep, `it shows the latest step ${latestStep}`);
  check((await table.locator('tbody tr').count()) >= 2, 'the other runs are listed too');
  await page.screenshot({ path: join(screenshots, 'experiment.png'), fullPage: true });

  await row.getByRole('link', { name: runName, exact: true }).click();
  await page.getByRole('heading', { name: runName }).waitFor();
  await page.locator('[data-testid="chart-train/loss"] canvas').waitFor();
  await page.locator('[data-testid="chart-eval/accuracy"] canvas').waitFor();
  const canvas = await page.locator('[data-testid="chart-train/loss"] canvas').boundingBox();
  check(canvas !== null && canvas.width > 200 && canvas.height > 100, 'the loss chart is drawn');
  // uPlot draws the series onto the canvas; a blank one means no data reached it.
  const inked = await page
    .locator('[data-testid="chart-train/loss"] canvas')
    .evaluate((element) => {
      const { data } = element.getContext('2d').getImageData(0, 0, element.width, element.height);
      let painted = 0;
      for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted += 1;
      return painted;
    });
  check(inked > 500, `the loss curve has ink on the canvas (${inked} pixels)`);

  const body = await page.locator('main').innerText();
  check(body.includes('Running'), 'the run page shows the phase');
  const attempts = page.getByRole('table', { name: 'Attempts' });
  check((await attempts.locator('tbody tr').count()) === 2, 'both attempts are listed');
  check((await attempts.innerText()).includes('preemption'), 'the second attempt says why');
  const events = await page.getByRole('list', { name: 'Events' }).innerText();
  check(events.includes('Preempted'), 'the events timeline shows the preemption');
  const bars = page.getByRole('list', { name: 'Attempt timeline' }).locator('li');
  check((await bars.count()) === 2, 'the timeline draws a bar per attempt');
  check(
    (await bars.first().getAttribute('aria-label')).includes('ended: Preempted'),
    'the first bar says the attempt was preempted',
  );
  const checkpoints = page.getByRole('table', { name: 'Checkpoints' });
  const checkpointText = await checkpoints.innerText();
  check(
    (await checkpoints.locator('tbody tr').count()) === 2 && checkpointText.includes('heldout'),
    'both checkpoints are listed with a heldout column',
  );
  check(checkpointText.includes('0.798'), 'the latest checkpoint shows its eval score');
  check(
    (await page.getByRole('definition').filter({ hasText: '%' }).count()) >= 1,
    'the goodput is shown as a percentage',
  );
  check(
    (await page.getByLabel('Spec as YAML').innerText()).includes('gpusPerNode: 2'),
    'the spec is shown as YAML',
  );
  await page.screenshot({ path: join(screenshots, 'run.png'), fullPage: true });

  // Zoom: a drag across the chart asks the server for that step range at full detail.
  const zoomed = page.waitForRequest((request) => request.url().includes('step_min='));
  const over = page.locator('[data-testid="chart-train/loss"] .u-over');
  const box = await over.boundingBox();
  await page.mouse.move(box.x + box.width * 0.2, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.4, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  const request = await zoomed;
  const asked = new URL(request.url()).searchParams;
  const low = Number(asked.get('step_min'));
  const high = Number(asked.get('step_max'));
  check(low > 0 && high > low && high < 600, `dragging zooms to steps ${low}-${high} from the server`);
  await page.getByText(`Steps ${low}`).waitFor();
  await page.getByRole('button', { name: 'Show all steps' }).click();
  await page.getByText('All steps.').waitFor();
  check(true, 'the zoom resets to every step');

  // Live: an event the server records now reaches the open page over SSE, without a reload.
  const waitedFrom = Date.now();
  await page.getByRole('status').filter({ hasText: 'live' }).waitFor();
  console.log(`# live after ${Date.now() - waitedFrom} ms`);
  const saved = await fetch(`${baseUrl}/api/v1/runs/${runId}/checkpoints`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ step: 590, uri: 'file:///ckpt/590', digest: `sha256:${'5'.repeat(64)}`, size_bytes: 1 }),
  });
  check(saved.ok, 'a checkpoint is registered through the API while the page is open');
  await page.getByRole('list', { name: 'Events' }).getByText('checkpoint at step 590 registered').waitFor();
  await checkpoints.locator('tbody tr').nth(2).waitFor();
  check(true, 'the new event and checkpoint appear on the open page');

  check(!page.url().includes(token), 'the token never appears in the URL');
  check(!consoleText.some((text) => text.includes(token)), 'the token never reaches the console');

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API token').waitFor();
  check(
    (await page.evaluate(() => sessionStorage.length)) === 0,
    'signing out forgets the token',
  );
  check(problems.length === 0, `no page errors or failed requests (${problems.join('; ')})`);
  console.log(`screenshots in ${screenshots}`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

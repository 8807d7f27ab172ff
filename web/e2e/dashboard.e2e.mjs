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
  await page.screenshot({ path: join(screenshots, 'run.png'), fullPage: true });

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

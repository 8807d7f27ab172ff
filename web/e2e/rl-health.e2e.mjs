// Opens an online RL run's page and a plain run's, and prints as one JSON line what the RL
// health section shows (tests/browser/test_dashboard.py runs it and checks the figures).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const { BASE_URL, TOKEN, RL_RUN_ID, PLAIN_RUN_ID, CHROMIUM } = process.env;
const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('response', (r) => r.status() >= 400 && problems.push(`${r.status()} ${r.url()}`));
  await page.goto(`${BASE_URL}/#/signin`);
  await page.getByLabel('API token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Projects' }).waitFor();

  await page.goto(`${BASE_URL}/#/runs/${RL_RUN_ID}`);
  const section = page.getByRole('region', { name: 'RL health' });
  const table = section.getByRole('table', { name: 'Round time split' });
  await table.waitFor();
  const totals = await section.getByLabel('RL totals').evaluate((dl) =>
    Object.fromEntries(
      [...dl.querySelectorAll('dt')].map((term) => [
        term.textContent,
        term.nextElementSibling.textContent,
      ]),
    ),
  );
  const rows = await table
    .locator('tr')
    .evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((cell) => cell.textContent)));
  const bars = await table
    .locator('.rl-bar')
    .evaluateAll((divs) => divs.map((div) => [...div.children].map((part) => part.title)));

  // The section asks for its metrics after the charts'; once that answer is in, a run
  // without rl/ metrics has had its chance to show one.
  const plainRl = `/runs/${PLAIN_RUN_ID}/metrics?keys=`;
  const asked = page.waitForResponse((r) => r.url().includes(plainRl));
  await page.goto(`${BASE_URL}/#/runs/${PLAIN_RUN_ID}`);
  await asked;
  await page.locator('[data-testid="chart-loss"] canvas').waitFor();
  await page.waitForTimeout(500);
  const plainSections = await page.getByRole('region', { name: 'RL health' }).count();
  console.log(JSON.stringify({ totals, rows, bars, plainSections, problems }));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

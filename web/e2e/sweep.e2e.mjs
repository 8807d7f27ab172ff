// A sweep's page as its project links to it: the header, the trials table (a trial stopped
// by ASHA with its reason, the best marked, sorting by the metric), ink in the scatters and
// the parallel coordinates; then a viewer asks to cancel a running sweep and is told why
// not, and an editor cancels it. Prints one JSON line of what the pages showed;
// tests/browser/test_sweep_page.py seeds the server and checks it.
import { join } from 'node:path';

import { signedIn as signIn } from './signed-in.mjs';

const { BASE_URL, EDITOR_TOKEN, VIEWER_TOKEN, PROJECT_ID, SWEEP_NAME, LIVE_SWEEP_ID, CHROMIUM, SCREENSHOT_DIR } =
  process.env;

const signedIn = (token) =>
  signIn(token, {
    baseUrl: BASE_URL,
    executablePath: CHROMIUM
  });

const cells = (table) =>
  table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((cell) => cell.innerText.trim())));
const actions = (page) => page.getByRole('region', { name: 'Sweep actions' });
const seen = {};

const editor = await signedIn(EDITOR_TOKEN);
try {
  const { page } = editor;
  await page.goto(`${BASE_URL}/#/projects/${PROJECT_ID}`);
  const list = page.getByRole('list', { name: 'Sweeps' });
  await list.getByRole('link', { name: SWEEP_NAME, exact: true }).waitFor();
  seen.listed = await list
    .locator('li')
    .evaluateAll((items) => items.map((li) => [...li.children].map((part) => part.textContent.trim())));
  await list.getByRole('link', { name: SWEEP_NAME, exact: true }).click();
  await page.waitForURL(/#\/sweeps\/\d+$/);
  seen.sweepHash = new URL(page.url()).hash;

  const table = page.getByRole('table', { name: 'Trials' });
  await table.locator('tbody tr').first().waitFor();
  seen.title = await page.locator('h1').innerText();
  seen.progress = await page.getByLabel('Trials started of the budget').innerText();
  seen.message = await page.getByLabel('Sweep message').innerText();
  seen.compareHref = await page.getByRole('link', { name: /^Compare all/ }).getAttribute('href');
  seen.cancelButtons = await page.getByRole('button', { name: 'Cancel sweep' }).count();
  seen.headers = await table.locator('thead th').allInnerTexts();
  seen.rows = await cells(table);
  seen.bestRow = await table.locator('tr.best').getAttribute('data-trial');
  seen.bestMark = await table.locator('.best-mark').innerText();
  const stopped = table.locator('details.stopped');
  seen.stoppedRow = await stopped.locator('xpath=ancestor::tr').getAttribute('data-trial');
  seen.stoppedTooltip = await stopped.locator('summary').getAttribute('title');
  await stopped.locator('summary').click();
  seen.stoppedReason = await stopped.locator('.reason').innerText();

  // The metric's header sorts best first, then worst first.
  const metricHeader = table.locator('thead th').filter({ hasText: 'loss' }).getByRole('button');
  await metricHeader.click();
  seen.bestFirst = (await cells(table)).map((row) => row[0]);
  await metricHeader.click();
  seen.worstFirst = (await cells(table)).map((row) => row[0]);

  const scatters = page.locator('[data-testid^="scatter-"]');
  seen.scatters = await scatters.count();
  seen.scatterPoints = await scatters.locator('circle.point').count();
  seen.scatterBest = await scatters.locator('circle.point.best').count();
  seen.scatterLabel = await scatters.first().locator('svg').getAttribute('aria-label');
  const parallel = page.getByTestId('parallel-coordinates');
  // SVG text has no innerText.
  seen.parallelAxes = await parallel.locator('.pc-axis .axis-title').evaluateAll((texts) => texts.map((t) => t.textContent));
  seen.parallelLines = await parallel
    .locator('path.trial-line')
    .evaluateAll((paths) => paths.map((p) => ({ d: p.getAttribute('d'), best: p.classList.contains('best') })));
  // The best is drawn last, over the others.
  seen.lastLineBest = seen.parallelLines.at(-1)?.best ?? false;
  if (SCREENSHOT_DIR) await page.screenshot({ path: join(SCREENSHOT_DIR, 'sweep.png'), fullPage: true });
  seen.editorProblems = editor.problems;
} finally {
  await editor.close();
}

const viewer = await signedIn(VIEWER_TOKEN);
try {
  const { page } = viewer;
  await page.goto(`${BASE_URL}/#/sweeps/${LIVE_SWEEP_ID}`);
  await actions(page).getByRole('button', { name: 'Cancel sweep' }).click();
  const dialog = page.getByRole('alertdialog', { name: 'Confirm: Cancel sweep' });
  seen.viewerConfirm = await dialog.locator('p').innerText();
  await dialog.getByRole('button', { name: 'Yes, cancel it' }).click();
  seen.viewerError = await actions(page).getByRole('alert').innerText();
  seen.viewerPhase = await page.locator('h1 .phase').innerText();
  seen.viewerPosts = viewer.posts;
} finally {
  await viewer.close();
}

const canceller = await signedIn(EDITOR_TOKEN);
try {
  const { page } = canceller;
  await page.goto(`${BASE_URL}/#/sweeps/${LIVE_SWEEP_ID}`);
  await actions(page).getByRole('button', { name: 'Cancel sweep' }).click();
  await page.getByRole('button', { name: 'Yes, cancel it' }).click();
  await page.locator('h1 .phase', { hasText: 'Cancelled' }).waitFor();
  seen.cancelledPhase = await page.locator('h1 .phase').innerText();
  seen.cancelButtonsAfter = await page.getByRole('button', { name: 'Cancel sweep' }).count();
  seen.editorPosts = canceller.posts;
  seen.cancellerProblems = canceller.problems;
} finally {
  await canceller.close();
}
console.log(JSON.stringify(seen));

// Acting on a run from its page: a viewer's token is refused with the API's reason, an
// editor's preempts a Running run and cancels another, each after a confirmation, and
// "Keep it running" changes nothing. Prints one JSON line of what the pages showed;
// tests/browser/test_dashboard.py runs it and checks it against the API.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const { BASE_URL, EDITOR_TOKEN, VIEWER_TOKEN, RUNNING_ID, PENDING_ID, CHROMIUM, SCREENSHOT_DIR } =
  process.env;

async function signedIn(token) {
  const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    viewport: { width: 1280, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const responses = [];
  page.on('response', (r) => r.request().method() === 'POST' && responses.push(`${r.status()} ${new URL(r.url()).pathname}`));
  await page.goto(`${BASE_URL}/#/signin`);
  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Projects' }).waitFor();
  return { page, responses, close: async () => (await context.close(), rmSync(profile, { recursive: true, force: true })) };
}

const actions = (page) => page.getByRole('region', { name: 'Run actions' });
const seen = {};

const viewer = await signedIn(VIEWER_TOKEN);
try {
  await viewer.page.goto(`${BASE_URL}/#/runs/${PENDING_ID}`);
  await actions(viewer.page).getByRole('button', { name: 'Cancel run' }).click();
  const dialog = viewer.page.getByRole('alertdialog', { name: 'Confirm: Cancel run' });
  seen.viewerConfirm = await dialog.locator('p').innerText();
  await dialog.getByRole('button', { name: 'Yes, cancel it' }).click();
  seen.viewerError = await actions(viewer.page).getByRole('alert').innerText();
  seen.viewerPhase = await viewer.page.locator('h1 .phase').innerText();
  seen.viewerResponses = viewer.responses;
} finally {
  await viewer.close();
}

const editor = await signedIn(EDITOR_TOKEN);
try {
  const { page } = editor;
  await page.goto(`${BASE_URL}/#/runs/${RUNNING_ID}`);
  await actions(page).getByRole('button', { name: 'Preempt' }).waitFor();
  seen.runningButtons = await actions(page).getByRole('button').allInnerTexts();
  await actions(page).getByRole('button', { name: 'Preempt' }).click();
  await page.getByRole('button', { name: 'Keep it running' }).click();
  seen.dialogsAfterKeep = await page.getByRole('alertdialog').count();
  await actions(page).getByRole('button', { name: 'Preempt' }).click();
  await page.getByRole('button', { name: 'Yes, preempt it' }).click();
  seen.preemptStatus = await actions(page).getByRole('status').innerText();
  if (SCREENSHOT_DIR) await page.screenshot({ path: join(SCREENSHOT_DIR, 'run-actions.png') });

  await page.goto(`${BASE_URL}/#/runs/${PENDING_ID}`);
  await page.locator('h1', { hasText: 'to-cancel' }).waitFor();
  await actions(page).getByRole('button', { name: 'Cancel run' }).waitFor();
  seen.pendingButtons = await actions(page).getByRole('button').allInnerTexts();
  await actions(page).getByRole('button', { name: 'Cancel run' }).click();
  await page.getByRole('button', { name: 'Yes, cancel it' }).click();
  await page.locator('h1 .phase', { hasText: 'Cancelled' }).waitFor();
  seen.cancelledPhase = await page.locator('h1 .phase').innerText();
  seen.actionsAfterCancel = await actions(page).count();
  seen.editorResponses = editor.responses;
} finally {
  await editor.close();
}
console.log(JSON.stringify(seen));

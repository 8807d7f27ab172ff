// A checkpoint's page promotes it to a deployment of its project: a viewer chooses one, is
// asked, confirms and is told why not (the API's 403 sentence); an editor does the same and
// the page says the promotion was accepted. Prints one JSON line of what the pages showed;
// tests/browser/test_promote_checkpoint.py seeds the server and checks it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const { BASE_URL, EDITOR_TOKEN, VIEWER_TOKEN, CHECKPOINT_ID, DEPLOYMENT_NAME, CHROMIUM, SCREENSHOT_DIR } = process.env;

async function signedIn(token) {
  const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    viewport: { width: 1280, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const problems = [];
  const posts = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('response', (r) => {
    const path = new URL(r.url()).pathname;
    if (r.request().method() === 'POST') posts.push(`${r.status()} ${path}`);
    else if (r.status() >= 400) problems.push(`${r.status()} ${path}`);
  });
  await page.goto(`${BASE_URL}/#/signin`);
  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Projects' }).waitFor();
  return {
    page,
    problems,
    posts,
    close: async () => (await context.close(), rmSync(profile, { recursive: true, force: true })),
  };
}

/** On the checkpoint's page: choose the deployment, press Promote, read the question, confirm. */
async function promote(page) {
  await page.goto(`${BASE_URL}/#/checkpoints/${CHECKPOINT_ID}`);
  const section = page.getByRole('region', { name: 'Promote' });
  const select = section.getByLabel('Deployment');
  await select.locator('option', { hasText: DEPLOYMENT_NAME }).waitFor({ state: 'attached' });
  const options = await select.locator('option').allInnerTexts();
  const promoteButton = section.getByRole('button', { name: 'Promote', exact: true });
  const disabledBeforeChoice = await promoteButton.isDisabled();
  await select.selectOption({ label: options.find((o) => o.startsWith(`${DEPLOYMENT_NAME} `)) });
  await promoteButton.click();
  const dialog = section.getByRole('alertdialog', { name: 'Confirm: Promote' });
  const question = await dialog.locator('p').innerText();
  await dialog.getByRole('button', { name: 'Yes, promote it' }).click();
  return { section, options, disabledBeforeChoice, question };
}

const seen = {};

const viewer = await signedIn(VIEWER_TOKEN);
try {
  const { section, options, disabledBeforeChoice, question } = await promote(viewer.page);
  seen.options = options;
  seen.disabledBeforeChoice = disabledBeforeChoice;
  seen.question = question;
  seen.viewerError = await section.getByRole('alert').innerText();
  seen.viewerPosts = viewer.posts;
  seen.viewerProblems = viewer.problems;
} finally {
  await viewer.close();
}

const editor = await signedIn(EDITOR_TOKEN);
try {
  const { section } = await promote(editor.page);
  seen.accepted = await section.getByRole('status').innerText();
  seen.dialogsAfter = await section.getByRole('alertdialog').count();
  if (SCREENSHOT_DIR) await editor.page.screenshot({ path: join(SCREENSHOT_DIR, 'promote.png'), fullPage: true });
  seen.editorPosts = editor.posts;
  seen.editorProblems = editor.problems;
} finally {
  await editor.close();
}
console.log(JSON.stringify(seen));

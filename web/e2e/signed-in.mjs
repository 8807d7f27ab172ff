// A Chromium page signed in to the dashboard with a token, for the e2e scripts that act as
// a user: it keeps the POSTs the page sent and every other answer of 400 or more (a page
// error too), so a script can say what went wrong. `unlistedPost(path)` names POSTs not worth
// listing (the editor's checks as one types); `expectedFailure(path)` answers a script asks
// to see (a refusal it tests), kept out of the problems.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export async function signedIn(
  token,
  { baseUrl, executablePath, unlistedPost = () => false, expectedFailure = () => false },
) {
  const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
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
    if (r.request().method() === 'POST' && !unlistedPost(path)) posts.push(`${r.status()} ${path}`);
    else if (r.status() >= 400 && !expectedFailure(path)) problems.push(`${r.status()} ${path}`);
  });
  await page.goto(`${baseUrl}/#/signin`);
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

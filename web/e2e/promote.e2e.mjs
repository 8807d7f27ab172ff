// A checkpoint's page promotes it to a deployment of its project: a viewer chooses one, is
// asked, confirms and is told why not (the API's 403 sentence); an editor does the same and
// the page says the promotion was accepted. Prints one JSON line of what the pages showed;
// tests/browser/test_promote_checkpoint.py seeds the server and checks it.
import { join } from 'node:path';

import { signedIn as signIn } from './signed-in.mjs';

const { BASE_URL, EDITOR_TOKEN, VIEWER_TOKEN, CHECKPOINT_ID, DEPLOYMENT_NAME, CHROMIUM, SCREENSHOT_DIR } = process.env;

const signedIn = (token) =>
  signIn(token, {
    baseUrl: BASE_URL,
    executablePath: CHROMIUM
  });

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

// The submit page as its entry points open it: a run typed with a bad value, its problem
// shown at its path and line, fixed and submitted; a finished run resubmitted and
// reproduced, and a pending one refused its reproduction with the API's reason; a sweep
// started from the project page; and a viewer's submission refused with the API's 403
// sentence. Prints one JSON line of what the pages showed; tests/browser/test_submit_page.py
// seeds the server and checks it.
import { join } from 'node:path';

import { signedIn as signIn } from './signed-in.mjs';

const { BASE_URL, EDITOR_TOKEN, VIEWER_TOKEN, PROJECT_ID, FINISHED_RUN_ID, BAD_MANIFEST, GOOD_MANIFEST, CHROMIUM, SCREENSHOT_DIR } =
  process.env;

const signedIn = (token) =>
  signIn(token, {
    baseUrl: BASE_URL,
    executablePath: CHROMIUM,
    unlistedPost: (path) => path.endsWith('/manifests/validate'),
    // A reproduction refused (409) is what one step asks to see.
    expectedFailure: (path) => path.endsWith('/reproduction'),
  });

const editorOf = (page) => page.getByRole('textbox', { name: 'Manifest (YAML)' });
const statusOf = (page) => page.getByRole('form', { name: 'Submit' }).getByRole('status');

async function replaceText(page, text) {
  await editorOf(page).click();
  await page.keyboard.press('Control+A');
  await page.keyboard.insertText(text);
}

async function accepted(page) {
  await statusOf(page).filter({ hasText: /^The API accepts this/ }).waitFor();
}

async function submitted(page, pattern) {
  await page.getByRole('button', { name: /^(Submit run|Start sweep)$/ }).click();
  await page.waitForURL(pattern);
  await page.locator('h1').waitFor();
  return { hash: new URL(page.url()).hash, title: await page.locator('h1').innerText() };
}

const seen = {};
const editor = await signedIn(EDITOR_TOKEN);
try {
  const { page } = editor;
  // A new run from the project page, typed with a bad value, then fixed.
  await page.goto(`${BASE_URL}/#/projects/${PROJECT_ID}`);
  await page.getByRole('link', { name: 'New run' }).click();
  await page.waitForURL(/#\/projects\/\d+\/submit$/);
  await accepted(page);
  seen.template = await editorOf(page).innerText();
  await replaceText(page, BAD_MANIFEST);
  const problems = page.getByRole('list', { name: 'Problems' });
  await problems.getByText('spec.gpusPerNode').waitFor();
  seen.problems = await problems.locator('li').allInnerTexts();
  seen.badStatus = await statusOf(page).innerText();
  seen.submitDisabled = await page.getByRole('button', { name: 'Submit run' }).isDisabled();
  // The line is marked where the path is, in the editor's gutter and under its text.
  await page.locator('.cm-lintRange-error').first().waitFor();
  seen.markedText = await page.locator('.cm-lintRange-error').allInnerTexts();
  if (SCREENSHOT_DIR) await page.screenshot({ path: join(SCREENSHOT_DIR, 'submit.png'), fullPage: true });
  // A YAML syntax error names its line, before the API is asked.
  await replaceText(page, 'kind: TrainingRun\nspec:\n\texperiment: typed\n');
  await problems.getByText(/^line \d+ YAML:/).waitFor();
  seen.syntaxProblem = await problems.locator('li').first().innerText();
  await replaceText(page, GOOD_MANIFEST);
  await accepted(page);
  seen.typed = await submitted(page, /#\/runs\/\d+$/);

  // The typed run is Pending, its inputs never resolved: a reproduction is refused, saying why.
  await page.getByRole('link', { name: 'Reproduce' }).click();
  await page.getByRole('alert').waitFor();
  seen.refusedReproduction = await page.getByRole('alert').innerText();

  // Resubmit a finished run: its manifest under a new free name.
  await page.goto(`${BASE_URL}/#/runs/${FINISHED_RUN_ID}`);
  await page.getByRole('link', { name: 'Resubmit' }).click();
  await accepted(page);
  seen.resubmitText = await editorOf(page).innerText();
  seen.resubmitBackend = await page.getByLabel('Backend').inputValue();
  seen.resubmitted = await submitted(page, /#\/runs\/\d+$/);

  // Reproduce it: the pinned submission, its backend fixed.
  await page.goto(`${BASE_URL}/#/runs/${FINISHED_RUN_ID}`);
  await page.getByRole('link', { name: 'Reproduce' }).click();
  await accepted(page);
  seen.reproduceText = await editorOf(page).innerText();
  seen.reproduceBackendFixed = await page.getByLabel('Backend').isDisabled();
  seen.reproduced = await submitted(page, /#\/runs\/\d+$/);

  // Start a sweep from the project page's template.
  await page.goto(`${BASE_URL}/#/projects/${PROJECT_ID}`);
  await page.getByRole('link', { name: 'Start a sweep' }).click();
  await accepted(page);
  seen.sweepText = await editorOf(page).innerText();
  seen.sweep = await submitted(page, /#\/sweeps\/\d+$/);

  seen.editorPosts = editor.posts;
  seen.editorProblems = editor.problems;
} finally {
  await editor.close();
}

const viewer = await signedIn(VIEWER_TOKEN);
try {
  const { page } = viewer;
  await page.goto(`${BASE_URL}/#/projects/${PROJECT_ID}/submit`);
  await replaceText(page, GOOD_MANIFEST.replace('name: typed', 'name: watched'));
  await accepted(page);
  await page.getByRole('button', { name: 'Submit run' }).click();
  await page.getByRole('form', { name: 'Submit' }).getByRole('alert').waitFor();
  seen.viewerError = await page.getByRole('form', { name: 'Submit' }).getByRole('alert').innerText();
  seen.viewerHash = new URL(page.url()).hash;
  seen.viewerPosts = viewer.posts;
  seen.viewerProblems = viewer.problems.filter((problem) => !problem.startsWith('403 '));
} finally {
  await viewer.close();
}
console.log(JSON.stringify(seen));

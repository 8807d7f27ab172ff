// A run's profiles as its page shows them (the phase bar and its table, the top operators,
// "show all"), then the trace's timeline: lanes, ink on the canvas, hover and click on an
// event, zoom by the buttons and by a drag, and search. Also a run without profiles (no
// section) and a Kubernetes run (the API's message). Prints one JSON line of what the pages
// showed; tests/browser/test_profiles_page.py seeds the server and checks it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const { BASE_URL, TOKEN, RUN_ID, PLAIN_RUN_ID, K8S_RUN_ID, PROFILE, SEARCH, CHROMIUM, SCREENSHOT_DIR } = process.env;

const profile = mkdtempSync(join(tmpdir(), 'crucible-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  viewport: { width: 1280, height: 1000 },
  deviceScaleFactor: 1,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
});
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(15_000);
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
page.on('response', (r) => {
  if (r.status() >= 400) problems.push(`${r.status()} ${new URL(r.url()).pathname}`);
});

const cells = (table) =>
  table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((cell) => cell.innerText.trim())));

// What the canvas holds: pixels that are neither blank nor a lane's background, and a digest
// of all of them, to tell one drawing from the next.
const canvasInk = (canvas) =>
  canvas.evaluate((c) => {
    const doc = c.ownerDocument;
    const soft = doc.defaultView.getComputedStyle(doc.documentElement).getPropertyValue('--bg-soft').trim();
    const probe = doc.createElement('canvas').getContext('2d');
    probe.fillStyle = soft;
    probe.fillRect(0, 0, 1, 1);
    const [sr, sg, sb] = probe.getImageData(0, 0, 1, 1).data;
    const { data, width } = c.getContext('2d').getImageData(0, 0, c.width, c.height);
    let ink = 0;
    let digest = 0;
    const firstRow = []; // x of inked pixels in the middle of the first row of the first lane
    for (let i = 0; i < data.length; i += 4) {
      digest = (digest * 31 + data[i] + 3 * data[i + 1] + 7 * data[i + 2] + 11 * data[i + 3]) | 0;
      const blank = data[i + 3] === 0 || (data[i] === sr && data[i + 1] === sg && data[i + 2] === sb);
      if (blank) continue;
      ink += 1;
      if (Math.floor(i / 4 / width) === 9) firstRow.push((i / 4) % width);
    }
    return { ink, digest, firstRow };
  });

const visibleWindow = async () => {
  const span = page.getByLabel('Visible window');
  return [Number(await span.getAttribute('data-start')), Number(await span.getAttribute('data-end'))];
};

const seen = {};
try {
  await page.goto(`${BASE_URL}/#/signin`);
  await page.getByLabel('API token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Projects' }).waitFor();

  // The run page's section.
  await page.goto(`${BASE_URL}/#/runs/${RUN_ID}`);
  const section = page.getByRole('region', { name: 'Profiles' });
  const card = section.getByRole('article', { name: `Profile ${PROFILE}` });
  await card.waitFor();
  seen.profiles = await section.locator('article').evaluateAll((items) => items.map((a) => a.dataset.profile));
  seen.title = await card.locator('h3').innerText();
  const link = card.getByRole('link', { name: 'Open the trace' });
  seen.traceHref = await link.getAttribute('href');
  seen.barWidth = await card.locator('.profile-split').evaluate((bar) => bar.getBoundingClientRect().width);
  seen.segments = await card
    .locator('.profile-segment')
    .evaluateAll((spans) => spans.map((s) => ({ phase: s.dataset.phase, width: s.getBoundingClientRect().width })));
  seen.phaseRows = await card
    .getByRole('table', { name: 'Time split' })
    .locator('tbody tr')
    .evaluateAll((trs) => trs.map((tr) => [tr.dataset.phase, tr.cells[1].innerText.trim(), tr.cells[2].innerText.trim()]));
  const operators = card.getByRole('table', { name: 'Top operators' });
  seen.operatorRows = await cells(operators);
  if (SCREENSHOT_DIR) await section.screenshot({ path: join(SCREENSHOT_DIR, 'run-profile.png') });
  const showAll = card.getByRole('button', { name: /^Show all/ });
  seen.showAll = await showAll.innerText();
  await showAll.click();
  seen.allOperators = (await cells(operators)).map((row) => row[0]);

  // A local run without profiles shows no section; a Kubernetes run's says where they are.
  const plainAsked = page.waitForResponse((r) => r.url().endsWith(`/api/v1/runs/${PLAIN_RUN_ID}/profiles`));
  await page.goto(`${BASE_URL}/#/runs/${PLAIN_RUN_ID}`);
  await plainAsked;
  await page.getByRole('heading', { name: 'Checkpoints' }).waitFor();
  await page.waitForTimeout(300); // the answer's render
  seen.plainProfilesHeadings = await page.getByRole('heading', { name: 'Profiles' }).count();
  await page.goto(`${BASE_URL}/#/runs/${K8S_RUN_ID}`);
  seen.k8sMessage = await page.getByRole('region', { name: 'Profiles' }).locator('.empty').innerText();

  // The timeline, opened from the run page's link.
  await page.goto(`${BASE_URL}/#/runs/${RUN_ID}`);
  await page.getByRole('link', { name: 'Open the trace' }).click();
  await page.waitForURL(/#\/runs\/\d+\/profiles\//);
  seen.traceHash = new URL(page.url()).hash;
  const canvas = page.locator('canvas.trace-canvas');
  await canvas.waitFor();
  seen.traceTitle = await page.locator('h1').innerText();
  seen.lanes = await page.getByRole('list', { name: 'Lanes' }).locator('li').allInnerTexts();
  seen.eventsNote = (await page.getByText(/events in \d+ lanes/).innerText()).split('details. ')[1];
  const drawn = await canvasInk(canvas);
  seen.ink = drawn.ink;

  // Hover and click the middle of the widest inked run of the first lane's top row.
  let best = [0, 0];
  let runStart = drawn.firstRow[0];
  drawn.firstRow.forEach((x, i) => {
    const next = drawn.firstRow[i + 1];
    if (next !== x + 1) {
      if (x - runStart > best[1] - best[0]) best = [runStart, x];
      runStart = next;
    }
  });
  const box = await canvas.boundingBox();
  const target = { x: box.x + (best[0] + best[1]) / 2, y: box.y + 9 };
  await page.mouse.move(target.x, target.y);
  seen.hover = await page.locator('.trace-hover').innerText();
  await page.mouse.click(target.x, target.y);
  const details = page.getByRole('region', { name: 'Selected event' });
  await details.waitFor();
  seen.details = {
    name: await details.locator('h2').innerText(),
    category: await details.locator('[data-field="category"]').innerText(),
    duration: await details.locator('[data-field="duration"]').innerText(),
    durationUs: Number(await details.locator('[data-field="duration"]').getAttribute('data-us')),
  };
  if (SCREENSHOT_DIR) await page.screenshot({ path: join(SCREENSHOT_DIR, 'trace.png') });

  // Zoom: a button, then a drag across the middle third, then back to the whole trace.
  const axisLabels = () => page.locator('.trace-axis text').allTextContents();
  const axisBefore = await axisLabels();
  seen.windows = { full: await visibleWindow() };
  await page.getByRole('button', { name: 'Zoom in' }).click();
  seen.windows.zoomedIn = await visibleWindow();
  seen.axisChanged = JSON.stringify(await axisLabels()) !== JSON.stringify(axisBefore);
  await page.mouse.move(box.x + box.width / 3, box.y + 30);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width / 2, box.y + 30, { steps: 5 });
  await page.mouse.move(box.x + (2 * box.width) / 3, box.y + 30, { steps: 5 });
  await page.mouse.up();
  seen.windows.dragged = await visibleWindow();
  await page.getByRole('button', { name: 'Show all', exact: true }).click();
  seen.windows.reset = await visibleWindow();

  // Search: the matches counted, and drawn apart from the rest.
  const search = page.getByLabel('Search events by name');
  const beforeSearch = (await canvasInk(canvas)).digest;
  await search.fill(SEARCH);
  const status = page.getByLabel('Search matches');
  await status.filter({ hasText: /match/ }).waitFor();
  seen.searchStatus = await status.innerText();
  seen.searchRedrew = (await canvasInk(canvas)).digest !== beforeSearch;
  await search.fill('no event is called this');
  seen.noMatchStatus = await status.innerText();
  seen.problems = problems;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(seen));

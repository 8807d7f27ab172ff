// Drive the dashboard in Debian's Chromium: sign in, walk projects -> experiment -> run, and
// check what a user would see. tests/browser/test_dashboard.py seeds a server and runs this;
// by hand: BASE_URL=http://127.0.0.1:4173 TOKEN=cru_... RUN_NAME=... node e2e/dashboard.e2e.mjs
import { appendFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
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
const checkpointUri = env('CHECKPOINT_URI');
const experimentName = env('EXPERIMENT_NAME', 'arithmetic');
const latestStep = env('LATEST_STEP', '');
const compare = env('COMPARE', '').split(',').filter(Boolean);
const screenshots = env('SCREENSHOT_DIR', join(tmpdir(), 'crucible-screenshots'));
const executablePath = env('CHROMIUM', '/usr/bin/chromium');
const signInCode = env('SIGNIN_CODE', '');
const runLog = env('RUN_LOG', '');
const mlflowRunId = env('MLFLOW_RUN_ID', '');
const mlflowRunName = env('MLFLOW_RUN_NAME', '');

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
  const headers = (await table.locator('thead th').allInnerTexts()).map((text) => text.replace(/[▲▼]/g, '').trim());
  check(
    JSON.stringify(headers) ===
      JSON.stringify(['Select', 'Name', 'Kind', 'Phase', 'Attempt', 'GPUs', 'Latest step', 'Best eval', 'Goodput', 'Age']),
    `the runs table has its columns (${headers.join(', ')})`,
  );
  const bodyRows = table.locator('tbody tr:not(.spacer-row)');
  const runLink = page.getByRole('link', { name: runName, exact: true });
  const row = bodyRows.filter({ has: runLink });
  // Newest first, one page of the API at a time: the seeded run is on the second page, which
  // is fetched with the cursor when the table is scrolled near the end of the first.
  await page.getByText('100 loaded, more as you scroll').waitFor();
  const rendered = await bodyRows.count();
  check(rendered > 10 && rendered < 60, `only the rows in view are in the DOM (${rendered} of 100)`);
  check((await row.count()) === 0, `${runName} is not on the first page`);
  const viewport = page.getByLabel('Runs, scrollable');
  const nextPage = page.waitForRequest((request) => request.url().includes('cursor='));
  await viewport.evaluate((element) => element.scrollTo(0, element.scrollHeight));
  await nextPage;
  for (let turn = 0; turn < 20 && (await row.count()) === 0; turn += 1) {
    await viewport.evaluate((element) => element.scrollTo(0, element.scrollHeight));
    await page.waitForTimeout(200);
  }
  await row.waitFor();
  check(true, 'scrolling down fetches the next page with the cursor');
  const cells = await row.locator('td').allInnerTexts();
  check(cells[1] === runName && cells[2] === 'train', `the run is listed as ${cells.join(' | ')}`);
  check(cells[3] === 'Running' && cells[4] === '2', 'it shows its phase and attempt count');
  if (latestStep) check(cells[6] === latestStep, `it shows the latest step ${latestStep}`);
  await row.locator('td').nth(7).filter({ hasText: '0.798' }).waitFor();
  check(true, 'it shows the best eval score of its checkpoints');
  check(/^\d+\.\d%$/.test(await row.locator('td').nth(8).innerText()), 'it shows its goodput');

  check(
    /Goodput \d+\.\d% over 1 run/.test(await page.getByLabel('Experiment goodput').innerText()),
    "the experiment's goodput is summarised",
  );

  // Filters and sorting are the server's: the eval job is the only run of its kind.
  await page.getByLabel('Kind').selectOption('eval');
  await page.getByText('1 run', { exact: true }).waitFor();
  check((await bodyRows.allInnerTexts()).join().includes(`${runName}-eval`), 'filtering by kind leaves the eval job');
  check(page.url().includes('kind=eval'), 'the filter is kept in the link, for Back and sharing');
  await page.getByLabel('Phase').selectOption('Failed');
  await page.getByText('No runs match these filters').waitFor();
  check(true, 'a filter that matches nothing says how to get the runs back');
  await page.getByRole('button', { name: 'Clear filters' }).click();
  await page.getByRole('button', { name: 'Name' }).click();
  await page.getByRole('columnheader', { name: 'Name' }).and(page.locator('[aria-sort="ascending"]')).waitFor();
  await bodyRows.first().filter({ hasText: runName }).waitFor();
  check(true, 'sorting by name puts the seeded run first');
  await bodyRows.first().locator('td').nth(7).filter({ hasText: '0.798' }).waitFor();
  await page.screenshot({ path: join(screenshots, 'experiment.png') });
  await page.getByRole('button', { name: 'Age' }).click();
  await bodyRows.first().filter({ hasText: compare[0] ?? 'sweep' }).waitFor();

  if (compare.length > 0) {
    for (const name of compare) await page.getByLabel(`Select ${name}`, { exact: true }).check();
    await page.getByRole('button', { name: `Compare ${compare.length} runs` }).click();
    await page.getByRole('heading', { name: `Compare ${compare.length} runs` }).waitFor();
    const legend = page.getByRole('list', { name: 'Compared runs' });
    for (const name of compare) await legend.getByRole('link', { name, exact: true }).waitFor();
    check(true, 'the compare page names both runs');
    const overlay = page.locator('[data-testid="compare-train/loss"] canvas');
    await overlay.waitFor();
    const ink = await overlay.evaluate((element) => {
      const { data } = element.getContext('2d').getImageData(0, 0, element.width, element.height);
      let painted = 0;
      for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted += 1;
      return painted;
    });
    check(ink > 500, `the overlaid loss curves have ink (${ink} pixels)`);
    const chartLegend = await page.locator('[data-testid="compare-train/loss"] .u-legend').innerText();
    check(compare.every((name) => chartLegend.includes(name)), 'the chart has a line per run');
    const diff = page.getByRole('table', { name: 'Config diff' });
    const lr = diff.locator('tbody tr').filter({ hasText: 'spec.config.lr' });
    check((await lr.count()) === 1, 'the config diff shows the learning rate, which differs');
    check(!(await diff.innerText()).includes('spec.gpusPerNode'), 'settings the runs share are hidden');
    await page.screenshot({ path: join(screenshots, 'compare.png'), fullPage: true });
    await page.goBack();
    await table.waitFor();
  }

  for (let turn = 0; turn < 20 && (await row.count()) === 0; turn += 1) {
    await viewport.evaluate((element) => element.scrollTo(0, element.scrollHeight));
    await page.waitForTimeout(200);
  }
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
  // The lists load after the metrics (the page asks for the charts first).
  await attempts.waitFor();
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
  const goodput = page.getByLabel('Goodput', { exact: true });
  await goodput.waitFor();
  check(/\d+\.\d%/.test(await goodput.innerText()), 'the goodput is shown as a percentage');
  check(
    (await page.getByLabel('Spec as YAML').innerText()).includes('gpusPerNode: 2'),
    'the spec is shown as YAML',
  );
  const provenance = await page.getByLabel('Code provenance').innerText();
  check(
    provenance.includes('c0ffee'.repeat(6) + 'c0ff') && provenance.includes('sha256:' + '5'.repeat(64)),
    'the run shows the commit and the digest of the uncommitted changes it was submitted with',
  );
  check(provenance.includes('Attempt 2 ran') && provenance.includes('torch 2.9.1'), 'an attempt shows the packages it ran');
  const pods = page.getByRole('table', { name: 'Pods' });
  await pods.waitFor();
  const podText = await pods.innerText();
  check(podText.includes('workstation') && podText.includes('0,1'), 'the run lists its process group with its machine and GPUs');
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

  // The keyboard's zoom: type the steps instead of dragging.
  const typed = page.waitForRequest((request) => request.url().includes('step_min=100&step_max=200'));
  await page.getByLabel('From step').fill('100');
  await page.getByLabel('to', { exact: true }).fill('200');
  await page.getByLabel('to', { exact: true }).press('Enter');
  await typed;
  await page.getByText('Steps 100–200').waitFor();
  check(true, 'typing a step range zooms the charts to it');
  await page.getByRole('button', { name: 'Show all steps' }).click();

  // Dark theme: picked in the header, applied at once, charts redrawn in its colours.
  await page.getByLabel('Theme').selectOption('dark');
  const root = page.locator('html');
  const background = await root.evaluate(
    (element) => element.ownerDocument.defaultView.getComputedStyle(element).backgroundColor,
  );
  check(
    (await root.getAttribute('data-theme')) === 'dark' && background === 'rgb(13, 17, 23)',
    `the dark theme applies (${background})`,
  );
  await page.locator('[data-testid="chart-train/loss"] canvas').waitFor();
  await page.screenshot({ path: join(screenshots, 'run-dark.png') });
  await page.getByLabel('Theme').selectOption('light');

  // Live: an event the server records now reaches the open page over SSE, without a reload.
  const waitedFrom = Date.now();
  await page.getByRole('status').filter({ hasText: 'live' }).waitFor();
  console.log(`# live after ${Date.now() - waitedFrom} ms`);
  const saved = await fetch(`${baseUrl}/api/v1/runs/${runId}/checkpoints`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ step: 590, uri: checkpointUri, digest: `sha256:${'5'.repeat(64)}`, size_bytes: 1 }),
  });
  check(saved.ok, 'a checkpoint is registered through the API while the page is open');
  await page.getByRole('list', { name: 'Events' }).getByText('checkpoint at step 590 registered').waitFor();
  await checkpoints.locator('tbody tr').nth(2).waitFor();
  check(true, 'the new event and checkpoint appear on the open page');

  if (runLog) {
    const logView = page.getByLabel('Log of attempt 2');
    await logView.getByText('step 599 loss').waitFor();
    check(true, "the log shows the end of the latest attempt's output");
    appendFileSync(runLog, 'saved checkpoint at step 600\n');
    await logView.getByText('saved checkpoint at step 600').waitFor();
    check(true, 'the log follows new lines while the run is live');
  }

  // The lineage explorer around the step-500 checkpoint: the run that wrote it, the dataset
  // that run read, and its eval, laid out as a graph.
  await page.getByRole('link', { name: 'Lineage of step 500' }).click();
  await page.getByRole('heading', { name: /^Lineage of checkpoint/ }).waitFor();
  const graph = page.getByTestId('lineage-graph');
  await graph.locator('.react-flow__node').first().waitFor();
  await graph.locator('.react-flow__edge').first().waitFor();
  const nodeCount = await graph.locator('.react-flow__node').count();
  const edgeCount = await graph.locator('.react-flow__edge').count();
  check(nodeCount >= 5 && edgeCount >= 4, `the graph has ${nodeCount} nodes and ${edgeCount} edges`);
  const labels = await graph.locator('.react-flow__node').allInnerTexts();
  console.log(`# graph nodes: ${labels.map((text) => text.replace(/\s+/g, ' ')).join(' | ')}`);
  for (const expected of [`${runName} step 500`, 'sums@1', 'heldout: accuracy=0.798']) {
    check(labels.some((text) => text.includes(expected)), `the graph shows ${expected}`);
  }
  await page.screenshot({ path: join(screenshots, 'lineage.png') });
  await graph.locator('.react-flow__node').filter({ hasText: 'sums@1' }).click();
  await page.getByRole('heading', { name: 'Lineage of dataset sums@1' }).waitFor();
  check(page.url().includes('#/lineage/dataset_version/'), 'clicking a node moves the explorer to it');
  // Until the dataset's graph arrives the checkpoint's stays up, marked busy: act on the
  // dataset's own graph, not on the one it replaces.
  await page.locator('[data-testid="lineage-graph"][aria-busy="false"]').waitFor();
  await graph.locator('.react-flow__node').filter({ hasText: runName }).first().waitFor();
  check(true, 'the dataset shows the run that read it');
  const exactly = page.locator('.entity-label').getByText(runName, { exact: true });
  const runNode = graph.locator('.react-flow__node').filter({ has: exactly });
  await runNode.focus();
  // Enter goes to whatever holds focus: make sure that is the run's node, not the one clicked last.
  await page.waitForFunction((node) => node === node.ownerDocument.activeElement, await runNode.elementHandle());
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: `Lineage of run ${runName}` }).waitFor();
  check(true, 'Enter on a focused node moves there too (keyboard)');

  await page.goto(`${baseUrl}/#/runs/${runId}`);
  await page.getByRole('table', { name: 'Checkpoints' }).getByRole('link', { name: '500', exact: true }).click();
  await page.getByRole('heading', { name: `${runName} · step 500` }).waitFor();
  const upstream = page.getByRole('region', { name: 'Upstream' });
  await upstream.getByRole('link', { name: 'sums@1' }).waitFor();
  check((await upstream.innerText()).includes('sha256:'), 'the checkpoint page lists its dataset with the digest');
  check(
    (await page.getByRole('table', { name: 'Eval scores' }).innerText()).includes('0.798'),
    'the checkpoint page shows its eval scores',
  );
  await page.getByTestId('lineage-graph').locator('.react-flow__node').first().waitFor();
  await page.screenshot({ path: join(screenshots, 'checkpoint.png'), fullPage: true });

  await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Cluster' }).click();
  await page.getByRole('heading', { name: 'Cluster', exact: true }).waitFor();
  const kube = page.getByRole('region', { name: 'Cluster kubernetes' });
  check(
    (await kube.getByLabel('GPU summary').innerText()).includes('48 of 96 GPUs allocated'),
    'the cluster page sums the GPUs allocated over the nodes',
  );
  check((await kube.getByRole('table', { name: 'Nodes' }).locator('tbody tr').count()) === 12, 'every node is listed');
  await kube.getByLabel('Show').selectOption('notReady');
  check(
    (await kube.getByRole('table', { name: 'Nodes' }).locator('tbody tr').innerText()).includes('gpu-11'),
    'the filter narrows the nodes to the one not ready',
  );
  await kube.getByLabel('Show').selectOption('all');
  const waiting = page.getByRole('table', { name: 'Waiting runs' });
  check((await waiting.innerText()).includes(`${runName}-eval`), 'the pending eval is among the waiting runs');
  await page.screenshot({ path: join(screenshots, 'cluster.png') });

  await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Deployments' }).click();
  await page.getByRole('heading', { name: 'Deployments', exact: true }).waitFor();
  const served = await page.getByRole('table', { name: 'Deployments' }).innerText();
  check(
    served.includes('arith-chat') && served.includes(`${runName} step 500`) && served.includes('2 / 2'),
    'the deployments page says which checkpoint each serves and how many pods are ready',
  );
  check(served.includes('serving what it names'), 'a deployment on the checkpoint its reference names says so');
  await page.screenshot({ path: join(screenshots, 'deployments.png') });

  if (mlflowRunId) {
    // A run the MLflow client made is a run like any other: its page and its chart.
    await page.goto(`${baseUrl}/#/runs/${mlflowRunId}`);
    await page.getByRole('heading', { name: mlflowRunName }).waitFor();
    await page.locator('[data-testid="chart-loss"] canvas').waitFor();
    check(true, 'a run logged through the MLflow API has its page and its loss chart');
  }

  check(!page.url().includes(token), 'the token never appears in the URL');
  check(!consoleText.some((text) => text.includes(token)), 'the token never reaches the console');

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API token').waitFor();
  check(
    (await page.evaluate(() => sessionStorage.length)) === 0,
    'signing out forgets the token',
  );
  check(problems.length === 0, `no page errors or failed requests (${problems.join('; ')})`);

  if (signInCode) {
    // The link `crucible up` prints: it signs in without a token, once.
    const link = `${baseUrl}/#/signin?code=${signInCode}`;
    await page.goto(link);
    await page.getByRole('heading', { name: 'Projects' }).waitFor();
    check(!page.url().includes(signInCode), 'the one-time link signs in and leaves the address bar');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API token').waitFor();
    await page.goto(link);
    const refusal = page.getByRole('alert');
    await refusal.waitFor();
    check((await refusal.innerText()).includes('used already'), 'the same link does not work twice');
  }
  console.log(`screenshots in ${screenshots}`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

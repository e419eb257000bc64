// Browser test of the llamafleet portal: a real headless Chromium (Debian's) driven by
// playwright-core against a real coordinator and CPU worker that run.sh started.
//
// Scenario: sign in with a token (a wrong one first); submit a job through the form after
// seeing a bad field marked on its line; watch it train with the loss chart gaining
// points while its logs are followed; its train and eval loss, usage, timeline and log
// events; resubmit it as a long job and cancel that one; compare the two; check a viewer
// cannot cancel; submit 2,000 jobs through POST /api/v1/jobs:batch and page, sort, search
// and filter through them; the workers (a straggler badge and GPU health from a served
// answer) and queues pages; a sweep and its comparison; last, on a second worker whose
// trainer is a script, a job's samples at three steps (two compared side by side) and its
// DPO rewards.
// Screenshots of every page go to ARTIFACT_DIR.
//
// Some checks depend on what the coordinator reports and run in the form it has: the
// evaluations history (GetJobMetricsResponse.evals) and GPU time and cost (Job.usage,
// Attempt.gpu_seconds, Queue.usage) are checked against the API's answer when present,
// and "—" is expected when absent; each such check is marked "with the server's".
//
// Environment (from run.sh): PORTAL_URL, ARTIFACT_DIR, TRAIN_DATA, EVAL_DATA, PATH_ROOT,
// CHROMIUM, TOKEN_USER / TOKEN_VIEWER (empty when the coordinator runs with --insecure-no-auth).

import {chromium} from 'playwright-core';
import fs from 'node:fs/promises';
import path from 'node:path';

const base = process.env.PORTAL_URL;
const artifacts = process.env.ARTIFACT_DIR;
const trainData = process.env.TRAIN_DATA;
const evalData = process.env.EVAL_DATA;
const pathRoot = process.env.PATH_ROOT;
const userToken = process.env.TOKEN_USER || '';
const viewerToken = process.env.TOKEN_VIEWER || '';
const auth = Boolean(userToken);
const started = Date.now();

function log(msg) { console.log(`[portal ${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s] ${msg}`); }
function check(cond, msg) { if (!cond) throw new Error(`check failed: ${msg}`); }

// Direct API calls (batch submission and waiting), with the user's token.
// `asUser`: with auth off, the caller's name (x-llamafleet-user), as the CLI sends its Unix user's.
async function apiCall(p, {method = 'GET', body, contentType, asUser} = {}) {
  const headers = {};
  if (userToken) headers.Authorization = `Bearer ${userToken}`;
  if (!userToken && asUser) headers['x-llamafleet-user'] = asUser;
  if (body !== undefined) headers['Content-Type'] = contentType || 'application/json';
  const res = await fetch(base + p, {method, headers, body: typeof body === 'string' || body === undefined ? body : JSON.stringify(body)});
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${p}: HTTP ${res.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

function trainingYaml(name, {lr = '3.0e-3', maxSteps = 40} = {}) {
  return `# portal test job
name: ${name}
labels: {suite: portal}
model:
  preset: tiny
data:
  train_path: ${trainData}
  eval_path: ${evalData}
  format: tokens
training:
  max_steps: ${maxSteps}
  eval_every_steps: 10
  micro_batch_size: 2
  seq_len: 128  # steps long enough that the page sees the chart grow, even on a loaded machine
  lr: ${lr}
  log_every: 1
  seed: 0  # explicit zeros survive a resubmission (run_policy.max_restarts too)
fsdp:
  sharding: FULL_SHARD
  mixed_precision: fp32
  activation_checkpointing: false
resources:
  nodes: 1
  gpus_per_node: 1
run_policy:
  max_restarts: 0
`;
}

const browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-dev-shm-usage']});
const context = await browser.newContext({viewport: {width: 1440, height: 1000}});
const page = await context.newPage();
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));
// Requests that failed or answered an error (the last ones are printed if the test fails).
const badResponses = [];
page.on('response', (r) => { if (r.status() >= 400) badResponses.push(`${r.request().method()} ${r.url()} → ${r.status()}`); });
page.on('requestfailed', (r) => badResponses.push(`${r.method()} ${r.url()} failed: ${r.failure()?.errorText}`));
page.on('console', (m) => { if (m.type() === 'error' && !/status of (400|401|404)/.test(m.text())) pageErrors.push(m.text()); });
page.setDefaultTimeout(20_000);

let shot = 0;
async function screenshot(name, opts = {}) {
  const file = path.join(artifacts, `${String(++shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({path: file, ...opts});
  log(`screenshot ${path.basename(file)}`);
}
async function rangeIs(text, timeout = 20_000) {
  await page.waitForFunction((t) => document.querySelector('#page-range')?.textContent === t, text, {timeout})
    .catch(async () => {
      throw new Error(`expected "${text}" in the pager, saw "${await page.textContent('#page-range')}" (page ${await page.getAttribute('#page-range', 'data-page')}, prev ${await page.isDisabled('#prev-page') ? 'disabled' : 'enabled'})`);
    });
}
async function jobState() { return (await page.textContent('.job-page .page-head .badge'))?.trim(); }
async function waitJobState(states, timeout) {
  await page.waitForFunction((s) => s.includes(document.querySelector('.job-page .page-head .badge')?.textContent), states, {timeout})
    .catch(async () => { throw new Error(`job did not reach ${states.join('/')} in ${timeout / 1000} s; it is ${await jobState()}: ${await page.textContent('.job-page .reason')}`); });
}
async function chartPoints() { return Number(await page.getAttribute('#chart-loss', 'data-points')); }
async function signIn(token, expectUser) {
  await page.waitForSelector('#signin[open]');
  await page.fill('#signin-token', token);
  await page.click('#signin button[type=submit]');
  await page.waitForFunction((u) => document.querySelector('#whoami')?.textContent.startsWith(u), expectUser);
}
async function signOut() {
  await page.click('#signout');
  await page.waitForSelector('#signin[open]');
}

let failed = false;
try {
  // --- sign in -------------------------------------------------------------------------
  log(`portal at ${base}, auth ${auth ? 'on' : 'off (--insecure-no-auth)'}`);
  await page.goto(`${base}/ui/`);
  if (auth) {
    await page.waitForSelector('#signin[open]');
    await screenshot('sign-in');
    await page.fill('#signin-token', 'not-a-token');
    await page.click('#signin button[type=submit]');
    await page.waitForFunction(() => /not accepted/.test(document.querySelector('#signin-error').textContent));
    await signIn(userToken, 'alice');
    check((await page.textContent('#whoami')).includes('user'), 'whoami shows the role');
    log('signed in as alice (user); a wrong token was refused');
  } else {
    await page.waitForFunction(() => /auth off/.test(document.querySelector('#whoami')?.textContent || ''));
    log('auth is off: no token asked for');
  }
  await page.waitForSelector('table.jobs');
  await screenshot('jobs-empty');

  // --- submit through the form, a bad field first ---------------------------------------
  await page.keyboard.press('g');
  await page.keyboard.press('s');
  await page.waitForSelector('#job-yaml');
  // The example names paths under the coordinator's own root, and validates as it stands.
  await page.waitForFunction((root) => document.querySelector('#job-yaml').value.includes(`${root}/data/`),
    pathRoot, {timeout: 15_000});
  await page.waitForFunction(() => document.querySelector('#validation').textContent === 'Valid', null, {timeout: 15_000});
  log(`the example spec names ${pathRoot} and is valid`);
  const bad = trainingYaml('portal-train', {lr: '0'});
  const lrLine = bad.split('\n').findIndex((l) => l.trim() === 'lr: 0') + 1;
  await page.fill('#job-yaml', bad);
  // Wait for this text's verdict, not an earlier one.
  await page.waitForFunction((n) => [...document.querySelectorAll('.gutter div.bad')]
    .some((e) => Number(e.textContent) === n), lrLine, {timeout: 15000}).catch(() => {});
  const marked = await page.$$eval('.gutter div.bad', (els) => els.map((e) => Number(e.textContent)));
  check(marked.length === 1 && marked[0] === lrLine, `the lr line (${lrLine}) is marked, marked: ${marked}`);
  const violations = await page.textContent('.violations');
  check(/training\.lr/.test(violations), `the violation names training.lr: ${violations}`);
  check(await page.getAttribute('#job-yaml', 'aria-invalid') === 'true', 'editor is aria-invalid');
  await screenshot('submit-bad-field');
  log(`bad field marked on line ${lrLine}: ${violations.trim()}`);

  // Tab inserts two spaces in the editor.
  await page.fill('#job-yaml', trainingYaml('portal-train'));
  await page.focus('#job-yaml');
  await page.keyboard.press('Control+End');
  await page.keyboard.press('Tab');
  check((await page.inputValue('#job-yaml')).endsWith('\n  '), 'Tab inserts two spaces');
  await page.keyboard.press('Backspace');
  await page.keyboard.press('Backspace');
  await page.waitForFunction(() => document.querySelector('#validation').textContent === 'Valid', null, {timeout: 15_000});
  check(await page.$$eval('.gutter div.bad', (e) => e.length) === 0, 'no line marked once valid');
  await page.click('#submit-job');
  await page.waitForFunction(() => /^#\/jobs\/\d+$/.test(location.hash));
  const trainId = (await page.evaluate(() => location.hash)).split('/').pop();
  log(`submitted job ${trainId} through the form`);

  // --- watch it run: chart gains points, logs followed ----------------------------------
  await page.waitForSelector('#chart-loss');
  await waitJobState(['RUNNING', 'SUCCEEDED'], 120_000);
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points) > 0, null, {timeout: 120_000});
  const first = await chartPoints();
  const firstState = await jobState();
  check(await page.isChecked('#log-follow'), 'logs follow a running job');
  await screenshot('job-running', {fullPage: true});
  await waitJobState(['SUCCEEDED', 'FAILED', 'CANCELLED'], 240_000);
  check(await jobState() === 'SUCCEEDED', `job ${trainId} succeeded (is ${await jobState()}: ${await page.textContent('.job-page .reason')})`);
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points) >= 40, null, {timeout: 20_000});
  const last = await chartPoints();
  check(last > first, `the loss chart gained points while the page was open (${first} → ${last})`);
  log(`loss chart: ${first} points when first seen (${firstState}), ${last} at the end`);
  await page.waitForFunction(() => document.querySelectorAll('#logs .line').length > 0, null, {timeout: 20_000});
  const logText = await page.textContent('#logs');
  check(/loss/.test(logText), 'the followed logs show the trainer\'s metrics lines');
  await page.waitForFunction(() => /ended/.test(document.querySelector('.log-status').textContent), null, {timeout: 20_000});
  // No table header on the job page is cut off (narrow columns wrap their labels).
  const cut = await page.$$eval('.grid-table th', (ths) => ths.filter((t) => t.offsetParent && t.scrollWidth > t.clientWidth + 1)
    .map((t) => t.textContent.trim()));
  check(cut.length === 0, `table headers shown whole: ${cut}`);
  const timeline = await page.textContent('.timeline');
  check(/SUCCEEDED/.test(timeline) && /RUNNING/.test(timeline), `the timeline shows the transitions: ${timeline}`);
  // Attempts: one, succeeded, its single task on w1 (node 0) succeeded too.
  await page.waitForFunction(() => /succeeded/.test(document.querySelector('#attempts tr[data-attempt="1"]')?.textContent || ''),
    null, {timeout: 20_000});
  const attemptRows = await page.$$eval('#attempts tbody tr:not(.phases)', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent.trim())));
  check(attemptRows.length === 1, `one attempt row: ${JSON.stringify(attemptRows)}`);
  const [num, aState, , ended, failure, workers, nodes] = attemptRows[0];
  check(nodes === '1', `attempt 1 shows its gang size: ${nodes}`);
  check(num === '1' && aState === 'succeeded' && failure === '', `attempt 1 succeeded: ${JSON.stringify(attemptRows[0])}`);
  check(/·/.test(ended), `attempt 1 shows when it ended and how long it took: ${ended}`);
  check(/^0:\s*w1\s+succeeded$/.test(workers), `attempt 1 ran on w1 as node 0, whose task succeeded: ${workers}`);
  // Its start-up phases, in one row under it, in the order they were done.
  const phases = await page.$$eval('#attempts tr.phases[data-phases-of="1"] li', (lis) => lis.map((li) => li.dataset.phase));
  check(['placed', 'trainers_started', 'data_ready', 'rendezvous', 'weights_loaded', 'first_step'].every((p) => phases.includes(p)) &&
    phases[0] === 'placed', `attempt 1 shows its start-up phases: ${JSON.stringify(phases)}`);
  // Rank filter: rank 0 only, no rank prefix.
  await page.selectOption('#log-rank', '0');
  await page.waitForFunction(() => document.querySelectorAll('#logs .line').length > 0 && !document.querySelector('#logs .rank'));
  // Hover readout on the chart.
  const box = await page.locator('#chart-loss svg').boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  check(/^step \d+: /.test(await page.textContent('#chart-loss .chart-readout')), 'hovering the chart reads a point');
  await screenshot('job-succeeded', {fullPage: true});
  log(`job ${trainId} SUCCEEDED; logs followed (${await page.$$eval('#logs .line', (e) => e.length)} rank-0 lines)`);

  // --- its loss chart: train and eval series, labelled -----------------------------------
  const trained = await apiCall(`/api/v1/jobs/${trainId}`);
  check(trained.latest_metrics?.eval_loss !== undefined, `job ${trainId} evaluated on data.eval_path: ${JSON.stringify(trained.latest_metrics)}`);
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss g.series[data-key=eval]')?.dataset.points) > 0,
    null, {timeout: 20_000});
  const lossChart = await page.$eval('#chart-loss', (fig) => ({
    series: [...fig.querySelectorAll('g.series')].map((g) => ({key: g.dataset.key, points: Number(g.dataset.points),
      dashed: g.querySelector('path.line').hasAttribute('stroke-dasharray'), marks: g.querySelectorAll('.marks circle').length})),
    legend: [...fig.querySelectorAll('.chart-legend li')].map((li) => li.textContent.trim()),
    label: fig.querySelector('svg').getAttribute('aria-label'),
  }));
  const [trainSeries, evalSeries] = lossChart.series;
  check(trainSeries?.key === 'train' && trainSeries.points >= 40 && !trainSeries.dashed,
    `the loss chart's first series is the solid train loss: ${JSON.stringify(lossChart)}`);
  check(evalSeries?.key === 'eval' && evalSeries.dashed && evalSeries.marks === evalSeries.points,
    `the eval loss series is dashed with a circle per evaluation: ${JSON.stringify(lossChart)}`);
  check(lossChart.legend.join('|') === 'train loss|eval loss', `the legend names both: ${lossChart.legend}`);
  check(/train loss: \d+ points/.test(lossChart.label) && /eval loss: \d+ points/.test(lossChart.label),
    `the chart's accessible name describes both series: ${lossChart.label}`);
  // With the server's evaluations history (GetJobMetricsResponse.evals) one point per
  // evaluation (eval_every_steps 10 of 40 steps); without it the job's last evaluation only.
  const metricsRes = await apiCall(`/api/v1/jobs/${trainId}/metrics?max_points=2000`);
  const evalsHistory = metricsRes.evals || [];
  if (evalsHistory.length) {
    check(evalSeries.points === evalsHistory.length, `one eval point per evaluation: ${evalSeries.points} of ${evalsHistory.length}`);
  } else {
    check(evalSeries.points === 1, `without an evals history, the last evaluation: ${evalSeries.points} points`);
  }
  // The summary: train loss, and the eval loss next to it.
  const summaryRow = (row) => page.textContent(`.summary dd[data-row=${row}]`);
  check(/^\d/.test(await summaryRow('train-loss')), `the train loss: ${await summaryRow('train-loss')}`);
  const evalRow = await summaryRow('eval-loss');
  check(/^\d[\d.e-]* after step 40 · best \d/.test(evalRow), `the eval loss after the last step and the best: ${evalRow}`);
  log(`loss chart: ${trainSeries.points} train points, ${evalSeries.points} eval points ` +
    `(evals history: ${evalsHistory.length || 'none from this coordinator'}); eval loss ${evalRow}`);

  // --- time held and cost (with the server's Job.usage and Attempt.gpu_seconds) ----------
  // The job ran on a CPU worker only: its time is CPU time, as `llamafleet describe` says.
  const gpuRow = await summaryRow('cpu-time');
  const costRow = await summaryRow('cost');
  if (trained.usage) {
    check(/CPU-(s|min|h)/.test(gpuRow), `the job's CPU time: ${gpuRow}`);
    check(trained.usage.cost === undefined ? costRow === '—' : /^\$\d/.test(costRow), `the job's cost: ${costRow}`);
  } else {
    check(gpuRow === '—' && costRow === '—', `no usage reported: CPU time ${gpuRow}, cost ${costRow}`);
  }
  const attemptsRes = await apiCall(`/api/v1/jobs/${trainId}/attempts`);
  const attemptGpu = (await page.textContent('#attempts tr[data-attempt="1"] td.gpu-time')).trim();
  check(Number(attemptsRes.attempts[0].gpu_seconds) > 0 ? /CPU-(s|min|h)/.test(attemptGpu) : attemptGpu === '—',
    `attempt 1's CPU time: ${attemptGpu} (API ${attemptsRes.attempts[0].gpu_seconds})`);
  const attemptHead = (await page.textContent('#attempts th.time-head')).trim();
  check(attemptHead === 'CPU time', `the attempts' time column: ${attemptHead}`);
  log(`usage: CPU time ${gpuRow}, cost ${costRow}, attempt 1 ${attemptGpu}`);

  // --- the timeline: the newest events, the final one always in view ---------------------
  const eventsRes = await apiCall(`/api/v1/jobs/${trainId}/events?limit=1000`);
  const shownEvents = () => page.$$eval('#timeline-list li', (lis) => lis.map((li) => Number(li.dataset.seq)));
  const total = Number(await page.getAttribute('#timeline-list', 'data-total'));
  const lastSeqApi = Math.max(...eventsRes.events.map((e) => Number(e.seq)));
  let seqs = await shownEvents();
  check(seqs[seqs.length - 1] === lastSeqApi && /SUCCEEDED/.test(await page.textContent('#timeline-list li:last-child')),
    `the timeline ends with the final event (seq ${lastSeqApi}): ${seqs}`);
  check(await page.locator('#timeline-list li:last-child').isVisible(), 'the final event is visible');
  check(seqs.length === Math.min(total, 6), `the newest ${Math.min(total, 6)} of ${total} events are shown: ${seqs}`);
  let timelineNote = `${total} events, all shown`;
  if (total > 6) {
    check(/Show \d+ earlier events?/.test(await page.textContent('#timeline-earlier')), 'a button shows the earlier events');
    await page.click('#timeline-earlier');
    seqs = await shownEvents();
    check(seqs.length === total && seqs[seqs.length - 1] === lastSeqApi, `all ${total} events once expanded: ${seqs}`);
    check(await page.getAttribute('#timeline-earlier', 'aria-expanded') === 'true', 'the toggle says it is expanded');
    await page.click('#timeline-earlier');
    check((await shownEvents()).length === 6, 'collapsed again to the newest 6');
    timelineNote = `the newest 6 of ${total} events, all ${total} on request`;
  }
  log(`timeline: ${timelineNote}`);

  // --- the logs: trainer records as compact lines, or hidden; each step once ---------------
  const stepLine = /step (\d+)\/\d+ loss /;
  await page.waitForFunction((re) => [...document.querySelectorAll('#logs .line:not(.ev)')].some((l) => new RegExp(re).test(l.textContent)),
    stepLine.source, {timeout: 20_000});
  const logView = await page.$eval('#logs', (box, re) => ({
    raw: [...box.querySelectorAll('.line')].filter((l) => /^(\[rank \d+\] )?\{"/.test(l.textContent)).length,
    human: box.querySelectorAll('.line:not(.ev)').length,
    metrics: box.querySelectorAll('.line.ev[data-kind=metrics]').length,
    // "[rank 0] 3" for each step line: a step said twice by one rank repeats its key.
    steps: [...box.querySelectorAll('.line')].map((l) => [l.textContent.match(/^\[rank \d+\] /), l.textContent.match(new RegExp(re))])
      .filter(([, m]) => m).map(([rank, m]) => `${rank ? rank[0] : ''}${m[1]}`),
    kinds: [...new Set([...box.querySelectorAll('.line.ev')].map((l) => l.dataset.kind))],
  }), stepLine.source);
  check(logView.raw === 0, `no raw JSON records in the log view: ${logView.raw}`);
  check(logView.metrics === 0, `no metrics records beside the trainer's step lines: ${logView.metrics}`);
  check(logView.steps.length > 0 && new Set(logView.steps).size === logView.steps.length,
    `each step once: ${logView.steps}`);
  check(logView.kinds.includes('eval') && logView.kinds.includes('exit'), `eval and exit records shown too: ${logView.kinds}`);
  check(logView.human > 0, `the trainer's human lines are shown: ${logView.human}`);
  await page.click('#log-events');
  const visible = await page.$$eval('#logs .line', (ls) => ls.filter((l) => l.offsetParent !== null).map((l) => l.classList.contains('ev')));
  check(visible.length === logView.human && !visible.includes(true), `"Show events" off hides the records only: ${visible.length} of ${logView.human} shown`);
  await page.click('#log-events');
  check(await page.locator('#logs .line.ev').first().isVisible(), '"Show events" on shows them again');
  await screenshot('job-evals-logs', {fullPage: true});
  log(`logs: ${logView.steps.length} steps once each, kinds ${logView.kinds}, ${logView.human} human lines`);

  // --- resubmit as a long job, watch the list update live, cancel it --------------------
  await page.click('#resubmit-job');
  await page.waitForSelector('#job-yaml');
  const pre = await page.inputValue('#job-yaml');
  check(pre.includes(`resubmitted from job ${trainId}`) && pre.includes('max_steps: 40'), 'resubmit prefills the spec');
  check(/^\s*seed: 0$/m.test(pre) && /^\s*max_restarts: 0$/m.test(pre),
    `resubmit keeps the explicit zeros (seed: 0, max_restarts: 0): ${pre}`);
  await page.fill('#job-yaml', pre.replace('max_steps: 40', 'max_steps: 1000000').replace('name: portal-train', 'name: portal-long'));
  await page.waitForFunction(() => document.querySelector('#validation').textContent === 'Valid', null, {timeout: 15_000});
  await page.click('#submit-job');
  await page.waitForFunction((id) => /^#\/jobs\/\d+$/.test(location.hash) && !location.hash.endsWith(`/${id}`), trainId);
  const longId = (await page.evaluate(() => location.hash)).split('/').pop();
  await waitJobState(['RUNNING'], 120_000);
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points) > 1, null, {timeout: 120_000});
  log(`long job ${longId} is running`);

  await page.keyboard.press('g');
  await page.keyboard.press('j');
  const row = page.locator(`table.jobs tr[data-id="${longId}"]`);
  await row.waitFor();
  const progress0 = await row.locator('.progress-text').textContent();
  const rowHandle = await row.elementHandle();
  await page.waitForFunction(([tr, p]) => tr.isConnected && tr.querySelector('.progress-text').textContent !== p,
    [rowHandle, progress0], {timeout: 30_000});
  log(`jobs list updated the row in place: ${progress0} → ${await row.locator('.progress-text').textContent()}`);
  await screenshot('jobs-live');
  // Keyboard: select the long job (newest first: row 1) and open it.
  await page.keyboard.press('j');
  check(await page.getAttribute('table.jobs tbody tr:nth-child(1)', 'aria-selected') === 'true', 'j selects the first row');
  await page.keyboard.press('Enter');
  await page.waitForFunction((id) => location.hash === `#/jobs/${id}`, longId);
  await page.waitForFunction(() => !document.querySelector('#cancel-job').disabled);
  page.once('dialog', (d) => d.accept());
  await page.click('#cancel-job');
  await waitJobState(['CANCELLED'], 60_000);
  check(await page.isDisabled('#cancel-job'), 'cancel is disabled once the job is terminal');
  await page.waitForFunction(() => /cancelled by alice|cancelled/.test(document.querySelector('.timeline').textContent));
  await screenshot('job-cancelled', {fullPage: true});
  log(`cancelled job ${longId} from its page`);

  // --- compare the two: ticked in the list, one chart, settings side by side ---------------
  await page.keyboard.press('g');
  await page.keyboard.press('j');
  await page.waitForSelector(`table.jobs tr[data-id="${trainId}"]`);
  // The eval loss column: the trained job evaluated after its last step.
  await page.waitForFunction((id) => /^\d/.test(document.querySelector(`table.jobs tr[data-id="${id}"] td[data-col=evalLoss]`)?.textContent || ''),
    trainId, {timeout: 20_000});
  check(await page.isDisabled('#compare-jobs'), 'compare needs two ticked jobs');
  await page.check(`table.jobs tr[data-id="${trainId}"] td[data-col=pick] input`);
  check(page.url().endsWith('#/jobs'), 'ticking a job does not open it');
  await page.check(`table.jobs tr[data-id="${longId}"] td[data-col=pick] input`);
  check((await page.textContent('#compare-jobs')) === 'Compare (2)', `the compare button counts: ${await page.textContent('#compare-jobs')}`);
  await page.click('#compare-jobs');
  await page.waitForFunction(() => location.hash.startsWith('#/compare?jobs='));
  const compareUrl = page.url();
  check(new URL(compareUrl).hash === `#/compare?jobs=${trainId},${longId}`, `the compare route names both jobs: ${compareUrl}`);
  async function compareView() {
    await page.waitForFunction((ids) => ids.every((id) => Number(document.querySelector(`#compare-chart g.series[data-key=train-${id}]`)?.dataset.points) > 1) &&
      document.querySelectorAll('#compare-table tbody tr[data-id] .badge').length === ids.length, [trainId, longId], {timeout: 20_000});
    return page.evaluate(() => ({
      series: Object.fromEntries([...document.querySelectorAll('#compare-chart g.series')].map((g) =>
        [g.dataset.key, {points: Number(g.dataset.points), dashed: g.querySelector('path.line').hasAttribute('stroke-dasharray'),
          color: g.querySelector('path.line').getAttribute('stroke')}])),
      legend: Object.fromEntries([...document.querySelectorAll('#compare-chart .chart-legend li')].map((li) => [li.dataset.key, li.textContent.trim()])),
      differs: [...document.querySelectorAll('#compare-table th.differs')].map((th) => th.dataset.field),
      same: [...document.querySelectorAll('#compare-table th[data-field]:not(.differs)')].map((th) => th.dataset.field),
      rows: Object.fromEntries([...document.querySelectorAll('#compare-table tbody tr[data-id]')].map((tr) =>
        [tr.dataset.id, {text: tr.textContent, final: tr.querySelector('.final-loss').textContent, best: tr.querySelector('.best-eval').textContent,
          usage: [...tr.querySelectorAll('td.usage')].map((td) => td.textContent)}])),
    }));
  }
  let cmp = await compareView();
  const tr = cmp.series[`train-${trainId}`], lr2 = cmp.series[`train-${longId}`], ev = cmp.series[`eval-${trainId}`];
  check(tr.points >= 40 && !tr.dashed && ev && ev.points >= 1 && ev.dashed && ev.color === tr.color,
    `the trained job: a solid train line and a dashed eval line of the same colour: ${JSON.stringify(cmp.series)}`);
  check(lr2.color !== tr.color, `one colour per job: ${JSON.stringify(cmp.series)}`);
  check(cmp.legend[`job-${trainId}`] === `#${trainId} portal-train` && cmp.legend[`job-${longId}`] === `#${longId} portal-long` &&
    /train loss/.test(cmp.legend['style-train']) && /eval loss/.test(cmp.legend['style-eval']),
    `the legend names each job and the line styles: ${JSON.stringify(cmp.legend)}`);
  check(cmp.differs.includes('training.max_steps') && !cmp.differs.includes('training.lr') && cmp.same.includes('training.lr') &&
    cmp.same.includes('training.seq_len') && cmp.same.includes('fsdp.sharding'),
    `max_steps differs, lr, seq_len and sharding do not: differs ${cmp.differs}, same ${cmp.same}`);
  check(/SUCCEEDED/.test(cmp.rows[trainId].text) && /CANCELLED/.test(cmp.rows[longId].text), 'each row shows its state');
  check(/^\d/.test(cmp.rows[trainId].final) && /^\d/.test(cmp.rows[trainId].best) && /^\d/.test(cmp.rows[longId].final),
    `final train and best eval loss: ${JSON.stringify(cmp.rows)}`);
  // With the server's Job.usage: GPU time filled in; without it "—".
  check(trained.usage ? /CPU-/.test(cmp.rows[trainId].usage[0]) : cmp.rows[trainId].usage[0] === '—',
    `the trained job's CPU time: ${cmp.rows[trainId].usage}`);
  await screenshot('compare', {fullPage: true});
  // The route is a link: opened afresh it shows the same comparison.
  await page.goto(compareUrl);
  cmp = await compareView();
  check(cmp.differs.includes('training.max_steps') && cmp.legend[`job-${longId}`] === `#${longId} portal-long`, 'the compare link opens the same view');
  log(`compared ${trainId} and ${longId}: differing ${cmp.differs.join(', ')}`);
  await page.goto(`${base}/ui/#/jobs`);
  await page.waitForSelector('#unpick-jobs:not([hidden])');
  const cutInList = await page.$$eval('table.jobs th', (ths) => ths.filter((t) => t.offsetParent && t.scrollWidth > t.clientWidth + 1)
    .map((t) => t.textContent.trim()));
  check(cutInList.length === 0, `the jobs list's headers shown whole: ${cutInList}`);
  await page.click('#unpick-jobs');
  check(await page.isDisabled('#compare-jobs') && !(await page.isChecked(`table.jobs tr[data-id="${trainId}"] td[data-col=pick] input`)),
    'untick all clears the selection');

  // --- 2,000 jobs through the batch API, paged in the UI -------------------------------
  const bulkSpec = (i) => ({spec: {name: `bulk-${String(i).padStart(4, '0')}`, labels: {batch: 'bulk'},
    model: {preset: 'tiny'}, data: {train_path: trainData, format: 'TOKENS'}, training: {max_steps: '10'},
    resources: {nodes: 50, gpus_per_node: 1}}, idempotency_key: `portal-bulk-${i}`});
  for (let b = 0; b < 2; b++) {
    const t0 = Date.now();
    const res = await apiCall('/api/v1/jobs:batch', {method: 'POST',
      body: {jobs: Array.from({length: 1000}, (_, k) => bulkSpec(b * 1000 + k))}});
    check(res.jobs.length === 1000, `batch ${b + 1} returned 1000 jobs`);
    log(`batch ${b + 1}: 1000 jobs in ${Date.now() - t0} ms`);
  }
  await page.keyboard.press('g');
  await page.keyboard.press('j');
  await page.fill('#filter-label', 'batch=bulk');
  await rangeIs('1–100 of 2,000');
  check(await page.$$eval('table.jobs tbody tr[data-id]', (r) => r.length) === 100, '100 rows on a page');
  check((await page.textContent('table.jobs tbody tr:first-child')).includes('bulk-1999'), 'newest first');
  await screenshot('jobs-2000');
  await page.keyboard.press('Escape');  // leave the label field: keys are shortcuts again
  await page.keyboard.press('n');
  await rangeIs('101–200 of 2,000');
  await page.click('#next-page');
  await rangeIs('201–300 of 2,000');
  check((await page.textContent('table.jobs tbody tr:first-child')).includes('bulk-1799'), 'page 3 starts at bulk-1799');
  await page.keyboard.press('p');
  await page.keyboard.press('p');
  await rangeIs('1–100 of 2,000');
  check(await page.isDisabled('#prev-page'), 'no previous page on the first page');
  await page.selectOption('#page-size', '1000');
  await rangeIs('1–1,000 of 2,000');
  await page.click('#next-page');
  await rangeIs('1,001–2,000 of 2,000');
  check(await page.$$eval('table.jobs tbody tr[data-id]', (r) => r.length) === 1000, '1000 rows on a page');
  check(await page.isDisabled('#next-page'), 'no next page on the last page');
  await page.click('#prev-page');
  await rangeIs('1–1,000 of 2,000');
  await page.selectOption('#page-size', '100');
  await rangeIs('1–100 of 2,000');
  // Sort by name: descending, then ascending.
  await page.click('th[data-col=name] button');
  await page.waitForFunction(() => document.querySelector('table.jobs tbody tr:first-child td[data-col=name]')?.textContent === 'bulk-1999');
  await page.click('th[data-col=name] button');
  await page.waitForFunction(() => document.querySelector('table.jobs tbody tr:first-child td[data-col=name]')?.textContent === 'bulk-0000');
  check(await page.getAttribute('th[data-col=name]', 'aria-sort') === 'ascending', 'aria-sort on the sorted column');
  // State filter: all 2,000 are QUEUED (50 nodes never fit); none RUNNING.
  await page.click('label.chip.state-queued');
  await rangeIs('1–100 of 2,000');
  await page.click('label.chip.state-running');
  await rangeIs('1–100 of 2,000');
  await page.click('label.chip.state-queued');
  await rangeIs('0 of 0');
  await page.click('label.chip.state-running');
  // Search by name (debounced), focused with "/".
  await page.keyboard.press('/');
  await page.keyboard.type('bulk-1234');
  await rangeIs('1–1 of 1');
  await page.fill('#job-search', 'bulk-123');
  await rangeIs('1–10 of 10');
  await page.keyboard.press('Escape');
  await page.keyboard.press('j');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.pending:not([hidden])');
  const pendingText = await page.textContent('.pending');
  check(/position \d+/.test(pendingText), `a queued job shows its queue position: ${pendingText}`);
  await screenshot('job-queued');
  log(`paged, sorted, filtered and searched 2,000 jobs; pending: ${pendingText.replace(/\s+/g, ' ').trim()}`);

  // --- a viewer cannot cancel ----------------------------------------------------------
  if (viewerToken) {
    const queuedUrl = await page.evaluate(() => location.hash);
    await signOut();
    await signIn(viewerToken, 'victor');
    await page.evaluate((h) => { location.hash = h; }, queuedUrl);
    await page.waitForSelector('.pending:not([hidden])');
    check(await page.isDisabled('#cancel-job'), 'a viewer cannot cancel');
    check(/Viewers/.test(await page.getAttribute('#cancel-job', 'title')), 'the disabled cancel button says why');
    check(await page.isDisabled('#resubmit-job'), 'a viewer cannot resubmit');
    await signOut();
    await signIn(userToken, 'alice');
    log('viewer: cancel and resubmit disabled');
  }

  // --- workers and queues ----------------------------------------------------------------
  await page.keyboard.press('g');
  await page.keyboard.press('w');
  await page.waitForSelector('.worker[data-id] .badge.ready');
  check((await page.textContent('.workers')).includes('w1'), 'worker w1 is listed');
  check(/heartbeat \d+ s ago/.test(await page.textContent('.workers')), 'last heartbeat shown');
  check(!(await page.$('.worker .badge.straggler')), 'no straggler badge on a worker never flagged');
  await screenshot('workers');
  // A straggler flag and GPU health as the coordinator serves them (WorkerInfo.straggler,
  // GpuSample's health fields), laid over w1's real answer: the badge with its rank and
  // job, and per GPU what is wrong.
  await page.route('**/api/v1/workers', async (route) => {
    const response = await route.fetch();
    const json = await response.json();
    const w = json.workers.find((x) => x.name === 'w1');
    w.straggler = {job_id: '1', rank: 1, action: 'restart-without', since: new Date().toISOString(),
      reason: "straggler: rank 1 on worker w1 works 0.31 s a step, the others' median 0.052 s"};
    w.gpus = [{index: 0, gpu_util: 50, clock_throttle_reasons: '64'}, {index: 1, gone: true},
      {index: 2, ecc_uncorrected_volatile: '3'}, {index: 3, clock_throttle_reasons: '5'}];
    await route.fulfill({response, json});
  });
  await page.waitForSelector('.worker[data-id] .worker-head .badge.straggler', {timeout: 10_000});
  const flagged = await page.textContent('.worker-straggler');
  check(flagged.includes('rank 1 of job 1 (restart-without)') && flagged.includes('works 0.31 s a step'),
    `the straggler line names rank, job, policy and reason: ${flagged}`);
  const gpuHealth = await page.$$eval('td.gpu-health', (tds) => tds.map((td) => `${td.className}:${td.textContent}`));
  check(JSON.stringify(gpuHealth) === JSON.stringify(['gpu-health warn:hw thermal', 'gpu-health bad:gone',
    'gpu-health bad:3 ECC', 'gpu-health:ok']), `each GPU's health: ${JSON.stringify(gpuHealth)}`);
  await screenshot('workers-sick');
  await page.unroute('**/api/v1/workers');
  await page.keyboard.press('g');
  await page.keyboard.press('q');
  await page.waitForSelector('tr[data-queue=default]');
  const q = await page.textContent('tr[data-queue=default]');
  check(q.includes('2,000'), `the default queue has 2,000 queued jobs: ${q}`);
  await screenshot('queues');

  // --- a sweep: one row per point with its parameters -----------------------------------
  const swept = await apiCall('/api/v1/jobs:batch', {method: 'POST', body: {jobs: [{spec: {name: 'portal-sweep',
    model: {preset: 'tiny'}, data: {train_path: trainData, format: 'TOKENS'}, training: {max_steps: '10'},
    resources: {nodes: 50, gpus_per_node: 1},
    sweep: {parameters: {'training.lr': {values: ['1e-4', '3e-4']}, 'training.seed': {values: ['1', '2']}},
      max_concurrent: 1}}, idempotency_key: 'portal-sweep'}]}, asUser: 'root'});
  // With auth off the portal's user is "anonymous"; the sweep (submitted as the CLI would,
  // by "root") is shown all the same.
  check(swept.jobs.length === 4, `a 2 x 2 sweep is 4 jobs: ${swept.jobs.length}`);
  await page.goto(`${base}/ui/#/jobs/${swept.jobs[3].job.id}`);
  await page.waitForSelector('#sweep-link');
  check((await page.textContent('#sweep-link')).includes('point 3 of 4'), 'a point links to its sweep');
  await page.click('#sweep-link');
  await page.waitForFunction(() => document.querySelectorAll('table.sweep tbody tr[data-id]').length === 4);
  const sweepHead = await page.textContent('table.sweep thead');
  check(sweepHead.includes('training.lr') && sweepHead.includes('training.seed') && sweepHead.includes('Best eval loss'),
    `parameter and eval columns: ${sweepHead}`);
  check((await page.textContent('table.sweep tbody tr:nth-child(4)')).includes('3e-4'), 'point 3 has lr 3e-4');
  check((await page.textContent('#sweep-summary')).includes('4 points, at most 1 at once'), 'the sweep summary');
  await page.waitForFunction(() => document.querySelector('table.sweep tbody')?.textContent.includes('next in line'));
  await screenshot('sweep');

  // Its points start ticked for comparison; unticking one leaves it out.
  check(await page.textContent('#compare-sweep') === 'Compare (4)', `every point ticked: ${await page.textContent('#compare-sweep')}`);
  await page.uncheck('table.sweep tbody tr:nth-child(2) td.pick input');
  check(await page.textContent('#compare-sweep') === 'Compare (3)', 'an unticked point is left out');
  await page.check('table.sweep tbody tr:nth-child(2) td.pick input');
  await page.click('#compare-sweep');
  await page.waitForFunction(() => location.hash.startsWith('#/compare?jobs='));
  const sweepIds = swept.jobs.map((j) => j.job.id);
  check(new URL(page.url()).hash === `#/compare?jobs=${sweepIds.join(',')}`, `the sweep's points in index order: ${page.url()}`);
  await page.waitForFunction((n) => document.querySelectorAll('#compare-table tbody tr[data-id] .badge').length === n, sweepIds.length);
  const sweepDiffers = await page.$$eval('#compare-table th.differs', (ths) => ths.map((th) => th.dataset.field));
  check(sweepDiffers.length === 2 && sweepDiffers.includes('training.lr') && sweepDiffers.includes('training.seed'),
    `the swept parameters are what differs: ${sweepDiffers}`);
  const lrCells = await page.$$eval('#compare-table td.differs[data-field="training.lr"]', (tds) => tds.map((td) => td.textContent));
  check(lrCells.join(',') === '0.0001,0.0001,0.0003,0.0003', `each point's lr: ${lrCells}`);
  await screenshot('compare-sweep', {fullPage: true});
  log(`sweep compared: ${sweepIds.length} points, differing ${sweepDiffers.join(', ')}`);

  // --- usage on the queues page (with the server's Queue.usage) ---------------------------
  const queuesRes = await apiCall('/api/v1/queues');
  const defaultQueue = queuesRes.queues.find((x) => x.name === 'default');
  await page.keyboard.press('g');
  await page.keyboard.press('q');
  await page.waitForSelector('tr[data-queue=default] td.gpu-time');
  const queueGpu = (await page.textContent('tr[data-queue=default] td.gpu-time')).trim();
  // Every worker of this cluster is a CPU worker: the queue's time is CPU time.
  check(defaultQueue.usage ? /CPU-(s|min|h)/.test(queueGpu) : queueGpu === '—', `the default queue's CPU time: ${queueGpu}`);
  const queueHead = (await page.textContent('table.queues th.time-head')).trim();
  check(queueHead === 'CPU time', `the queues' time column: ${queueHead}`);
  log(`queue default: CPU time ${queueGpu}, cost ${(await page.textContent('tr[data-queue=default] td.cost')).trim()}`);

  // --- samples at evaluations and DPO rewards (samples_trainer.sh on worker w2) -----------
  // Last: w2 starts now, so no earlier job ran on it; the job asks for its label.
  await fs.writeFile(path.join(pathRoot, 'start-w2'), '');
  const samplesYaml = trainingYaml('portal-samples', {maxSteps: 30})
    .replace('resources:\n', 'resources:\n  node_labels: {role: samples}\n');
  const samplesId = (await apiCall('/api/v1/jobs', {method: 'POST', body: samplesYaml, contentType: 'application/yaml'})).job.id;
  await page.goto(`${base}/ui/#/jobs/${samplesId}`);
  await waitJobState(['SUCCEEDED'], 60_000);
  await page.waitForSelector('#samples:not([hidden]) #samples-table tbody tr', {timeout: 20_000});
  const stepOptions = await page.$$eval('#samples-step option', (os) => os.map((o) => o.value));
  check(stepOptions.join(',') === '30,20,10', `the steps with samples, newest first: ${stepOptions}`);
  const sampleRows = () => page.$$eval('#samples-table tbody tr', (trs) => trs.map((tr) => ({
    index: tr.dataset.index, prompt: tr.querySelector('td.prompt pre').textContent,
    cells: [...tr.querySelectorAll('td.sample')].map((td) => ({step: td.dataset.step, text: td.querySelector('pre')?.textContent,
      note: td.querySelector('.sample-note')?.textContent}))})));
  let rows = await sampleRows();
  check(rows.length === 3 && rows.every((r) => r.cells.length === 1 && r.cells[0].step === '30'),
    `the latest step's three samples: ${JSON.stringify(rows)}`);
  check(rows[0].prompt === 'What is 2+2?' && rows[0].cells[0].text === 'At step 30: four' &&
    /eos · 5 tokens · contains 1 · exact_match 0/.test(rows[0].cells[0].note), `sample 0 with its scores: ${JSON.stringify(rows[0])}`);
  check(rows[2].cells[0].text === '<b id=injected>step 30</b>' && !(await page.$('#injected')),
    'model output is shown as text, never as markup');
  // Another step, then two side by side.
  await page.selectOption('#samples-step', '10');
  await page.waitForFunction(() => document.querySelector('#samples-table td.sample')?.dataset.step === '10');
  check((await sampleRows())[1].cells[0].text === 'Step 10 says blue', 'step 10 shows what was written at step 10');
  await page.selectOption('#samples-compare', '30');
  await page.waitForFunction(() => document.querySelectorAll('#samples-table thead th[data-step]').length === 2);
  rows = await sampleRows();
  check(rows.every((r) => r.cells.map((c) => c.step).join(',') === '10,30') &&
    rows[0].cells.map((c) => c.text).join(' | ') === 'At step 10: four | At step 30: four',
    `steps 10 and 30 side by side: ${JSON.stringify(rows[0])}`);
  // DPO: the rewards chart and the summary row.
  check(await page.isVisible('#chart-dpo'), 'a DPO job has the rewards chart');
  const dpoKeys = await page.$$eval('#chart-dpo g.series', (gs) => gs.map((g) => `${g.dataset.key}:${g.dataset.points}`));
  check(dpoKeys.join(',') === 'chosen:30,rejected:30,margin:30', `chosen, rejected and margin at every step: ${dpoKeys}`);
  const dpoRow = await page.textContent('.summary dd[data-row=dpo-rewards]');
  check(dpoRow === 'chosen 1.5 · rejected -0.75 · accuracy 75% · margin 2.25', `the latest rewards: ${dpoRow}`);
  await page.locator('#samples').scrollIntoViewIfNeeded();
  await screenshot('job-samples', {fullPage: true});
  await page.goto(`${base}/ui/#/jobs/${trainId}`);
  await page.waitForSelector('#chart-loss');
  check(await page.isHidden('#chart-dpo') && await page.isHidden('#samples'), 'a job without samples or DPO shows neither');
  log(`job ${samplesId}: samples at steps ${stepOptions}, steps 10 and 30 compared; DPO rewards ${dpoRow}`);

  check(pageErrors.length === 0, `no script errors in the page: ${pageErrors.join(' | ')}`);
  log(`PASS in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} catch (err) {
  failed = true;
  console.error(`\nportal test FAILED: ${err.message}`);
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join(' | ')}`);
  if (badResponses.length) console.error(`failed requests: ${badResponses.slice(-10).join(' | ')}`);
  try {
    console.error(`page ${page.url()}; validation: ${await page.textContent('#validation', {timeout: 1000})}`);
    console.error(`editor (first lines): ${(await page.inputValue('#job-yaml', {timeout: 1000})).split('\n').slice(0, 12).join(' / ')}`);
  } catch { /* not on the submit page */ }
  try { await screenshot('failure', {fullPage: true}); } catch { /* browser gone */ }
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);

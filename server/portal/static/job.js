// One job: header with cancel/resubmit, pending explanation, live charts from the metrics
// history (train and eval loss on one chart), GPU time and cost, GPU utilisation of its
// workers, state timeline (SSE; timeline.js), attempts with their outcome, workers and GPU
// time, samples at evaluations (samples.js), checkpoints, logs (logs.js) and the spec. A DPO
// job has a rewards chart and a summary row. Everything refreshes in place.

import {api, query, sse} from './api.js';
import {LineChart, decimalsOf} from './chart.js';
import {createTimeline} from './timeline.js';
import {createLogView} from './logs.js';
import {createSamplesView, dpoSeries, dpoSummary} from './samples.js';
import {h, setText, Poller, fmtInt, fmtNum, fmtBytes, fmtTime, fmtFullTime, fmtAgo, fmtGpuTime, fmtCost,
  fmtUsage, attemptsDevice, parseTime, TERMINAL_STATES} from './util.js';

const REFRESH_MS = 3000;
export const DRAFT_KEY = 'llamafleet.draft';
// The job a draft resubmits (the new job records it: POST ...?derived_from=ID).
export const DERIVED_KEY = 'llamafleet.draft.derived_from';

// "42 s", "5 min 3 s", "2 h 5 min".
function fmtDuration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// AttemptState → label and badge colour (a preempted attempt is STOPPED with its class).
const ATTEMPT_STATES = {
  ATTEMPT_ACTIVE: ['active', 'state-running'],
  ATTEMPT_SUCCEEDED: ['succeeded', 'state-succeeded'],
  ATTEMPT_FAILED: ['failed', 'state-failed'],
  ATTEMPT_STOPPED: ['stopped', 'state-cancelled'],
};
const TASK_ENDED = new Set(['TASK_SUCCEEDED', 'TASK_FAILED', 'TASK_KILLED']);
const TASK_STATE_CLASS = {
  TASK_STARTING: 'state-scheduled', TASK_RUNNING: 'state-running', TASK_SUCCEEDED: 'state-succeeded',
  TASK_FAILED: 'state-failed', TASK_KILLED: 'state-cancelled',
};

// The job's eval sets by name: data.eval's, or [''] for data.eval_path's; [] without either.
// The first is the one its latest and best eval loss follow.
export function evalSets(job) {
  const data = job?.spec?.data || {};
  if (data.eval?.length) return data.eval.map((s) => s.name || '');
  return data.eval_path ? [''] : [];
}

// The eval series of a job's set `set` (default: its first): the metrics response's evals
// history (every evaluation, all attempts); without one (an older coordinator) the job's
// last evaluation alone.
export function evalPoints(metrics, job, set = evalSets(job)[0] || '') {
  const evals = (metrics?.evals || []).filter((e) => (e.set || '') === set);
  if (evals.length) return evals.map((e) => ({x: Number(e.step), y: Number(e.loss)}));
  const m = job?.latest_metrics || {};
  const first = set === (evalSets(job)[0] || '');
  return first && m.eval_loss !== undefined ? [{x: Number(m.eval_step || 0), y: Number(m.eval_loss)}] : [];
}

const pct = (v, step) => (step ? `${(v * 100).toFixed(decimalsOf(step * 100))}%` : `${fmtNum(v * 100, 3)}%`);

export function mountJob(root, ctx, id) {
  const base = `/api/v1/jobs/${encodeURIComponent(id)}`;
  const aborts = new Set();     // AbortControllers of open streams
  let job = null;
  let stopped = false;
  const events = new Map();     // seq → JobEvent
  let lastSeq = 0;
  // What the job's time was held on ('GPU' or 'CPU', attemptsDevice) from the last
  // attempts and workers read; the unit of its time in the summary and the attempts.
  let attemptList = [];
  let workerList = [];
  let device = 'GPU';

  // --- layout ------------------------------------------------------------------------
  const titleName = h('span', 'job');
  const title = h('h1#job-title', titleName, ' ', h('span.muted', `#${id}`));
  const badge = h('span.badge');
  const cancelBtn = h('button#cancel-job.btn-danger', {type: 'button'}, 'Cancel');
  const resubmitBtn = h('button#resubmit-job', {type: 'button'}, 'Resubmit');
  const meta = h('p.meta');
  const reason = h('p.reason');
  const notice = h('div.banner', {role: 'status', hidden: true});
  const pending = h('section.panel.pending', {hidden: true, 'aria-label': 'Why this job is waiting'});
  const summary = h('dl.summary');

  const charts = {
    loss: new LineChart({title: 'Loss', legend: true}),
    lr: new LineChart({title: 'Learning rate', color: 'var(--c2)'}),
    tps: new LineChart({title: 'Tokens / s', color: 'var(--c3)'}),
    // The trainer reports MFU only when it knows the device's peak FLOPS (not on CPU ranks).
    mfu: new LineChart({title: 'MFU', color: 'var(--c4)', format: pct, emptyText: 'not reported for this job'}),
    // training.objective dpo only: hidden for other jobs.
    dpo: new LineChart({title: 'DPO rewards', legend: true}),
  };
  const chartGrid = h('div.charts', Object.values(charts).map((c) => c.el));
  charts.loss.el.id = 'chart-loss';
  charts.dpo.el.id = 'chart-dpo';
  charts.dpo.el.hidden = true;
  const samples = createSamplesView(base);

  const gpuPanel = h('div.gpu-list');
  const timeline = createTimeline();
  const attemptBody = h('tbody');
  const attemptTable = h('table#attempts.grid-table.compact.attempts',
    h('colgroup', ['3em', '7.5em', '6.5em', '10em', '7em', 'auto', '4.5em', '6.5em', 'auto'].map((w) => h('col', {style: {width: w}}))),
    h('thead', h('tr', ['#', 'State', 'Started', 'Ended', 'Failure', 'Workers', 'Nodes', 'GPU time', 'Reason'].map((t) =>
      h('th', {scope: 'col', class: t === 'GPU time' ? 'num time-head' : ''}, t)))),
    attemptBody);
  const ckptBody = h('tbody');
  const ckptTable = h('table.grid-table.compact',
    h('colgroup', ['6em', '6.5em', '6em', '7em', '8em', 'auto'].map((w) => h('col', {style: {width: w}}))),
    h('thead', h('tr', ['Step', 'Attempt', 'Loss', 'Size', 'Time', 'Path'].map((t) => h('th', {scope: 'col'}, t)))), ckptBody);

  const logs = createLogView(base);
  const specPre = h('pre#spec.spec');
  const specFmt = h('select#spec-format', {'aria-label': 'Spec format'}, h('option', {value: 'yaml'}, 'YAML'), h('option', {value: 'json'}, 'JSON'));

  root.append(h('section.page.job-page',
    h('div.page-head', title, badge, h('span.spacer'), resubmitBtn, cancelBtn),
    meta, reason, notice, pending,
    h('div.job-grid',
      h('div.col-main',
        h('section.panel', h('h2', 'Training'), chartGrid),
        samples.el,
        h('section.panel', h('h2', 'Attempts'), h('div.table-wrap', attemptTable)),
        h('section.panel', h('h2', 'Checkpoints'), h('div.table-wrap', ckptTable)),
        h('section.panel', h('h2', 'Logs'), logs.el),
        h('section.panel', h('h2', 'Spec', h('span.spacer'), specFmt), specPre)),
      h('div.col-side',
        h('section.panel', h('h2', 'Summary'), summary),
        h('section.panel', h('h2', 'Workers'), gpuPanel),
        h('section.panel', h('h2', 'Timeline'), timeline.el)))));

  // --- rendering ---------------------------------------------------------------------
  function canCancel() {
    const s = ctx.session;
    if (!job || TERMINAL_STATES.has(job.state)) return [false, 'The job has finished'];
    if (s.role === 'ADMIN') return [true, ''];
    if (s.role === 'USER' && job.owner === s.user) return [true, ''];
    return [false, s.role === 'USER' ? `Only ${job.owner} or an admin can cancel this job` : 'Viewers cannot cancel jobs'];
  }

  // "LoRA r 16 on q_proj, v_proj · 65.5M trainable of 69.0B (0.095%)", or "full".
  function finetuning(peft, est, preset) {
    let s = 'full';
    if (peft.method === 'lora') {
      s = peft.adapter_path ? `LoRA from ${peft.adapter_path}` : 'LoRA';
      if (peft.r) s += ` r ${peft.r}`;
      if (peft.alpha) s += ` alpha ${peft.alpha}`;
      if ((peft.target_modules || []).length) s += ` on ${peft.target_modules.join(', ')}`;
    }
    const total = Number(est.parameters || 0), trainable = Number(est.trainable_parameters || 0);
    if (total > 0) {
      const n = (x) => x >= 1e9 ? `${(x / 1e9).toFixed(2)}B` : x >= 1e6 ? `${(x / 1e6).toFixed(1)}M` : String(x);
      s += ` · ${n(trainable)} trainable of ${n(total)} (${(100 * trainable / total).toPrecision(3)}%)`;
      // The estimate cannot read the tokenizer the trainer sizes the tiny presets from.
      if (['tiny', 'tiny-gqa'].includes(preset)) s += ', counted with a 32,000-piece vocabulary';
    }
    return s;
  }

  // "tensor parallel 8 × data parallel 4 (32 ranks)", or null without tensor parallelism
  // (parallelism.tensor_parallel unset or 1): the Parallelism line of `llamafleet describe`.
  function parallelism(spec) {
    const tp = Number(spec.parallelism?.tensor_parallel || 1);
    if (tp <= 1) return null;
    const res = spec.resources || {};
    const world = (res.nodes || 1) * (res.gpus_per_node || 1);
    return `tensor parallel ${tp} × data parallel ${world / tp} (${world} ranks)`;
  }

  // "1.52 s per step on p5.48xlarge (H100 80GB) · 64,700 tokens/s · MFU 43.1% · 6.8 GPU-h / 1,000
  // steps ($52.10)", the job's total when max_steps is set: the Step estimate line of describe.
  function stepEstimate(e) {
    if (!e || !e.step_seconds) return '—';
    let s = `${Number(e.step_seconds).toFixed(2)} s per step on ${e.instance_type} (${e.gpu}) · ` +
      `${fmtInt(Math.round(Number(e.tokens_per_second)))} tokens/s · MFU ${(100 * Number(e.mfu)).toFixed(1)}% · ` +
      `${fmtNum(e.gpu_hours_per_1000_steps, 3)} GPU-h / 1,000 steps`;
    if (e.cost_per_1000_steps !== undefined) s += ` (${fmtCost(e.cost_per_1000_steps)})`;
    if (Number(e.total_steps || 0) > 0) {
      s += ` · job: ${fmtNum(e.gpu_hours, 3)} GPU-h` + (e.cost !== undefined ? ` (${fmtCost(e.cost)})` : '');
    }
    return s;
  }

  function renderJob() {
    if (!job) return;
    const spec = job.spec || {};
    setText(titleName, spec.name || 'job');
    setText(badge, job.state);
    badge.className = `badge state-${String(job.state).toLowerCase()}`;
    const res = spec.resources || {};
    setText(meta, `owner ${job.owner} · queue ${spec.queue || 'default'} · priority ${spec.priority || 0} · ` +
      `${res.nodes || 1} × ${res.gpus_per_node || 1} ranks · created ${fmtFullTime(job.create_time)}`);
    setText(reason, job.status_reason || '');
    const [ok, why] = canCancel();
    cancelBtn.disabled = !ok;
    cancelBtn.title = why;
    resubmitBtn.disabled = ctx.session.role === 'VIEWER';
    resubmitBtn.title = resubmitBtn.disabled ? 'Viewers cannot submit jobs' : 'Open the submit page with this spec';

    const p = job.pending || {};
    pending.hidden = job.state !== 'QUEUED';
    if (!pending.hidden) {
      pending.replaceChildren(h('h2', 'Waiting'),
        h('p', h('strong', p.code || 'QUEUED'), ' ', p.message || 'waiting for the next scheduling pass'),
        h('p.muted', p.queue_position ? `position ${fmtInt(p.queue_position)} in queue ${spec.queue || 'default'}` : '',
          p.estimated_start ? ` · estimated start ${fmtFullTime(p.estimated_start)}` : ''));
    }

    const m = job.latest_metrics || {};
    const usage = fmtUsage(job.usage, device);
    const rows = [
      ['Progress', m.total_steps && Number(m.total_steps) ? `step ${fmtInt(m.step)} of ${fmtInt(m.total_steps)}` : (Number(m.step) ? `step ${fmtInt(m.step)}` : '—')],
      ['Train loss', Number(m.step) ? fmtNum(m.loss) : '—'],
      ['Eval loss', m.eval_loss !== undefined
        ? `${fmtNum(m.eval_loss)} after step ${fmtInt(m.eval_step || 0)} · best ${fmtNum(m.best_eval_loss ?? m.eval_loss)}`
        : (evalSets(job).length ? '—' : '— (no data.eval_path)')],
      ['Attempts', String(job.attempts || 0)],
      ['Restarts', `${job.restarts || 0} of ${spec.run_policy?.max_restarts ?? 0}`],
      [`${device} time`, usage.time],
      ['Cost', usage.cost],
      ['Workers', (job.workers || []).join(', ') || '—'],
      ['Updated', `${fmtTime(job.update_time)} (${fmtAgo(job.update_time)})`],
      ['Finetuning', finetuning(spec.peft || {}, job.memory_estimate || {}, spec.model?.preset)],
      ['Step estimate', stepEstimate(job.step_time_estimate)],
      ...(parallelism(spec) ? [['Parallelism', parallelism(spec)]] : []),
      ...(spec.sweep?.point ? [['Sweep', `${spec.sweep.point.sweep} · point ${spec.sweep.point.index || 0} of ` +
        `${spec.sweep.point.points} (${(spec.sweep.point.values || []).join(', ')})`]] : []),
      ...(m.dpo ? [['DPO rewards', dpoSummary(m.dpo)]] : []),
      ['Tokens / s', Number(m.step) ? fmtNum(m.tokens_per_second) : '—'],
      ['Peak memory', Number(m.peak_memory_bytes) ? fmtBytes(m.peak_memory_bytes) : '—'],
    ];
    const keys = rows.map(([k]) => k).join('|');
    if (summary.dataset.keys !== keys) {
      summary.dataset.keys = keys;
      summary.replaceChildren(...rows.flatMap(([k]) => [h('dt', k), h('dd', {dataset: {row: k.toLowerCase().replaceAll(' ', '-')}})]));
    }
    rows.forEach(([k, v], i) => {
      const dd = summary.children[2 * i + 1];
      if (k === 'Sweep') dd.replaceChildren(h('a#sweep-link', {href: `#/sweeps/${encodeURIComponent(spec.sweep.point.sweep)}`}, v));
      else setText(dd, v);
    });

    logs.update(job);
    renderSpec();
  }

  // The YAML is the server's (GET .../spec.yaml: explicit zeros kept, the old job's
  // default checkpoint dir left out), fetched once: a job's spec never changes.
  let specYaml = null;
  function loadSpecYaml() {
    if (!specYaml) {
      specYaml = api(`${base}/spec.yaml`, {text: true});
      specYaml.catch(() => { specYaml = null; });
    }
    return specYaml;
  }
  function renderSpec() {
    if (!job) return;
    if (specFmt.value === 'json') {
      setText(specPre, JSON.stringify(job.spec, null, 2));
      return;
    }
    loadSpecYaml().then((text) => {
      if (specFmt.value !== 'json') setText(specPre, text);
    }, (err) => setText(specPre, `Cannot load the spec as YAML: ${err.message}`));
  }
  specFmt.addEventListener('change', renderSpec);

  function addEvent(ev) {
    const seq = Number(ev.seq);
    if (events.has(seq)) return;
    events.set(seq, ev);
    lastSeq = Math.max(lastSeq, seq);
    timeline.add(ev);
  }

  function renderCheckpoints(list) {
    const sig = JSON.stringify(list.map((c) => [c.step, c.attempt, c.path]));
    if (ckptBody.dataset.sig === sig) return;
    ckptBody.dataset.sig = sig;
    ckptBody.replaceChildren(...(list.length ? list.map((c) => h('tr',
      h('td.num', fmtInt(c.step)), h('td.num', c.attempt), h('td.num', fmtNum(c.loss)), h('td.num', fmtBytes(c.bytes)),
      h('td', {title: fmtFullTime(c.time)}, fmtTime(c.time)), h('td.path', {title: c.path}, c.path)))
      : [h('tr.empty', h('td', {colspan: 6}, 'No checkpoints yet.'))]));
  }

  // An attempt's start-up phases as one row under it: each phase with its time since the
  // placement and its own duration ("data ready +1.52 s (0.06 s, token cache hit)").
  function phasesRow(a) {
    const phases = a.phases || [];
    if (!phases.length) return null;
    const start = parseTime(a.start_time);
    const at = (p) => (start && parseTime(p.time) ? `+${((parseTime(p.time) - start) / 1000).toFixed(2)} s` : '');
    return h('tr.phases', {dataset: {phasesOf: a.attempt}},
      h('td'), h('td', {colspan: 8}, h('ol.phase-list', {'aria-label': `Start-up of attempt ${a.attempt}`},
        phases.map((p) => h('li', {dataset: {phase: p.name}},
          h('span.phase-name', p.name.replaceAll('_', ' ')), ' ', h('span.phase-at', at(p)),
          h('span.muted', ` (${Number(p.seconds || 0).toFixed(2)} s${p.detail ? `, ${p.detail}` : ''})`))))));
  }

  // Newest first. Workers by node rank, each with its task's last reported state.
  function renderAttempts(list) {
    attemptList = list;
    updateDevice();
    const sig = device + JSON.stringify(list.map((a) => [a.attempt, a.state, a.end_time, a.reason, a.nodes, a.resize_reason, a.gpu_seconds, a.cost,
      (a.tasks || []).map((t) => [t.worker, t.state, t.message]), (a.phases || []).map((p) => p.name)]));
    if (attemptBody.dataset.sig === sig) return;
    attemptBody.dataset.sig = sig;
    attemptBody.replaceChildren(...(list.length ? list.flatMap((a) => {
      const [label, cls] = ATTEMPT_STATES[a.state] || [String(a.state || '?'), ''];
      const start = parseTime(a.start_time);
      const end = parseTime(a.end_time);
      const took = start && end ? fmtDuration(end - start) : '';
      const tasks = a.tasks || [];
      // A task of an ended attempt still STARTING/RUNNING was on a worker that was lost
      // before it could report: say so rather than "running".
      const taskState = (t) => (end && !TASK_ENDED.has(t.state) ? 'no report' : String(t.state || '?').replace('TASK_', '').toLowerCase());
      const tasksText = tasks.map((t) => `node ${t.node_rank || 0}: ${t.worker} ${taskState(t)}` +
        (t.message ? ` (${t.message})` : '')).join('\n');
      return [h('tr', {dataset: {attempt: a.attempt}},
        h('td.num', a.attempt),
        h('td', h('span', {class: `badge ${cls}`}, label)),
        h('td', {title: fmtFullTime(a.start_time)}, fmtTime(a.start_time)),
        h('td', {title: end ? fmtFullTime(a.end_time) : 'still running'},
          end ? `${fmtTime(a.end_time)} · ${took}` : h('span.muted', 'running')),
        h('td.failure', a.failure_class || ''),
        h('td.tasks', {title: tasksText}, tasks.map((t) => h('span.task',
          h('span.muted', `${t.node_rank || 0}:`), ' ', t.worker, ' ',
          h('span', {class: `badge task-badge ${end && !TASK_ENDED.has(t.state) ? '' : TASK_STATE_CLASS[t.state] || ''}`}, taskState(t))))),
        h('td.num.nodes', String(a.nodes || tasks.length)),
        h('td.num.gpu-time', {title: a.cost !== undefined ? `cost ${fmtCost(a.cost)}` : 'no price for these workers'},
          Number(a.gpu_seconds) ? fmtGpuTime(a.gpu_seconds, device) : '—'),
        h('td.reason', {title: [a.resize_reason, a.reason, a.resume_from && `resumed from ${a.resume_from}`].filter(Boolean).join('\n')},
          a.resize_reason ? h('span.badge.resize-badge', a.resize_reason) : null, a.resize_reason && a.reason ? ' ' : null,
          a.reason || (a.resume_from ? h('span.muted', `resumed from ${a.resume_from}`) : ''))),
      phasesRow(a)].filter(Boolean);
    }) : [h('tr.empty', h('td', {colspan: 9}, 'Not started yet.'))]));
  }

  // Recomputes `device`; on a change, the summary and the attempts' header follow.
  function updateDevice() {
    const now = attemptsDevice(attemptList, workerList);
    if (now === device) return;
    device = now;
    setText(attemptTable.querySelector('th.time-head'), `${device} time`);
    if (job) renderJob();
  }

  function renderGpus(workers) {
    workerList = workers;
    if (attemptList.length) renderAttempts(attemptList);
    const mine = (job?.workers || []).map((w) => workers.find((x) => x.id === w || x.name === w) || {name: w, missing: true});
    if (!mine.length) {
      if (!gpuPanel.querySelector('.empty')) gpuPanel.replaceChildren(h('p.muted.empty', 'Not placed on any worker yet.'));
      return;
    }
    const sig = JSON.stringify(mine.map((w) => [w.name, w.state, w.gpus, w.last_heartbeat]));
    if (gpuPanel.dataset.sig === sig) return;
    gpuPanel.dataset.sig = sig;
    gpuPanel.replaceChildren(...mine.map((w, rank) => {
      const inv = w.inventory || {};
      const total = new Map((inv.gpus || []).map((g) => [g.index, g]));
      const gpus = w.gpus || [];
      return h('div.gpu-worker',
        h('div.gpu-worker-head', h('span.muted', `node ${rank}`), ' ', h('a', {href: '#/workers'}, w.name || w.id),
          ' ', w.state ? h('span.badge', {class: `badge ${String(w.state).toLowerCase()}`}, String(w.state).replace('WORKER_', '')) : null),
        gpus.length ? gpus.map((g) => h('div.gpu-row',
          h('span.gpu-idx', `GPU ${g.index}`),
          h('span.meter', {title: `${fmtNum(g.gpu_util, 3)}% utilisation`}, h('span.meter-fill', {style: {width: `${Math.min(100, g.gpu_util || 0)}%`}})),
          h('span.num', `${Math.round(g.gpu_util || 0)}%`),
          h('span.muted', `${fmtBytes(g.memory_used_bytes)} / ${fmtBytes(total.get(g.index)?.memory_bytes || 0)}`)))
          : h('p.muted', w.missing ? 'worker no longer registered' : `CPU worker (${inv.cpu_ranks || 0} ranks): no GPU telemetry`));
    }));
  }

  // --- data --------------------------------------------------------------------------
  async function refreshMetrics() {
    const res = await api(`${base}/metrics?max_points=2000`);
    const pts = res.points || [];
    const series = (f) => pts.map((p) => ({x: Number(p.step), y: Number(f(p))}));
    const loss = [{key: 'train', label: 'train loss', color: 'var(--c1)', points: series((p) => p.loss)}];
    // An eval series per eval set when the job evaluates at all: dashed, a circle per
    // evaluation ("eval loss" alone for data.eval_path's set).
    const colors = ['var(--c4)', 'var(--c2)', 'var(--c3)', 'var(--c5)', 'var(--c6)'];
    evalSets(job).forEach((set, i) => {
      loss.push({key: set ? `eval-${set}` : 'eval', label: set ? `eval loss (${set})` : 'eval loss',
        color: colors[i % colors.length], dashed: true, markers: true, points: evalPoints(res, job, set)});
    });
    charts.loss.setSeries(loss);
    charts.lr.setData(series((p) => p.lr));
    charts.tps.setData(series((p) => p.tokens_per_second));
    charts.mfu.setData(pts.some((p) => p.mfu) ? series((p) => p.mfu) : []);
    const dpo = dpoSeries(pts);
    charts.dpo.el.hidden = dpo.length === 0;
    if (dpo.length) charts.dpo.setSeries(dpo);
  }

  // Attempts change with the job's events (start, end) and, in between, with task states:
  // fetched when an event arrived, every third tick, and once more at the end.
  let attemptTick = 0;
  let attemptsSeenSeq = null;
  function refreshAttempts(terminal) {
    if (!Number(job.attempts)) {
      renderAttempts([]);
      return null;
    }
    const seq = job.last_event_seq;
    if (!terminal && attemptTick++ % 3 !== 0 && seq === attemptsSeenSeq) return null;
    return api(`${base}/attempts`).then((r) => {
      attemptsSeenSeq = seq;
      renderAttempts(r.attempts || []);
    });
  }

  let ckptTick = 0;
  let finalDone = false;
  async function refresh() {
    try {
      job = await api(base);
      ctx.setConn(true);
    } catch (err) {
      if (err.httpStatus === 404) {
        notice.hidden = false;
        notice.className = 'banner error';
        setText(notice, `Job ${id} does not exist.`);
        poller.stop();
        return;
      }
      if (err instanceof TypeError) ctx.setConn(false);
      throw err;
    }
    renderJob();
    const terminal = TERMINAL_STATES.has(job.state);
    // Checkpoints and samples change at checkpoints and evaluations: every third tick.
    const slow = ckptTick++ % 3 === 0 || terminal;
    await Promise.all([
      refreshMetrics(),
      refreshAttempts(terminal),
      slow ? api(`${base}/checkpoints`).then((r) => renderCheckpoints(r.checkpoints || [])) : null,
      slow ? samples.refresh(!terminal) : null,
      api('/api/v1/workers').then((r) => renderGpus(r.workers || [])),
    ]);
    if (terminal) {
      // One last full refresh after the end, then stop polling.
      if (finalDone) poller.stop();
      finalDone = true;
    }
  }
  const poller = new Poller(refresh, REFRESH_MS);

  // Timeline: the first message is the job, then one per event; the stream ends after the
  // terminal event. Reconnects resume after the last seq seen.
  async function followEvents() {
    while (!stopped) {
      const ac = new AbortController();
      aborts.add(ac);
      try {
        await sse(`${base}/events${query({follow: 'true', after_seq: lastSeq})}`, (ev) => {
          if (ev.event === 'job') {
            job = ev.data;
            renderJob();
          } else if (ev.event === 'event') {
            addEvent(ev.data);
            poller.poke();  // state changed: refresh job, metrics and checkpoints now
          }
        }, ac.signal);
        if (job && TERMINAL_STATES.has(job.state) || lastSeq && [...events.values()].some((e) => TERMINAL_STATES.has(e.to_state))) {
          poller.poke();
          return;
        }
      } catch (err) {
        if (stopped || err.name === 'AbortError' || err.httpStatus === 404 || err.httpStatus === 401) return;
      } finally {
        aborts.delete(ac);
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  }

  // --- actions -----------------------------------------------------------------------
  cancelBtn.addEventListener('click', async () => {
    if (!job) return;
    if (!confirm(`Cancel job ${job.id} (${job.spec?.name || ''})? Its ranks are stopped.`)) return;
    cancelBtn.disabled = true;
    try {
      const res = await api(`${base}:cancel`, {method: 'POST', body: {reason: `cancelled from the portal by ${ctx.session.user}`}});
      job = res.job || job;
      notice.hidden = false;
      notice.className = 'banner';
      setText(notice, res.message || 'cancelled');
      renderJob();
      poller.poke();
    } catch (err) {
      notice.hidden = false;
      notice.className = 'banner error';
      setText(notice, `Cannot cancel: ${err.message}`);
      renderJob();
    }
  });
  resubmitBtn.addEventListener('click', async () => {
    if (!job) return;
    try {
      // The spec as it was written, not the effective one with every default.
      const text = await api(`${base}/spec.yaml?submitted=true`, {text: true});
      let head = `# resubmitted from job ${job.id}\n`;
      // Only a FAILED or CANCELLED job of yours hands its export dir over (it never completed an
      // export).
      const exportDir = job.spec?.output?.export_dir;
      if (exportDir &&
          !(job.owner === ctx.session.user && ['FAILED', 'CANCELLED'].includes(job.state))) {
        head += `# output.export_dir ${exportDir} stays job ${job.id}'s (${
            job.state}): name a new one\n`;
      }
      sessionStorage.setItem(DRAFT_KEY, head + text);
      sessionStorage.setItem(DERIVED_KEY, job.id);
      ctx.navigate('/submit');
    } catch (err) {
      notice.hidden = false;
      notice.className = 'banner error';
      setText(notice, `Cannot resubmit: ${err.message}`);
    }
  });

  // --- start -------------------------------------------------------------------------
  poller.start();
  followEvents();
  api(base).then((j) => {
    job = j;
    logs.setFollow(!TERMINAL_STATES.has(j.state));
    renderJob();
    logs.load();
  }).catch(() => {});

  return {
    cleanup() {
      stopped = true;
      poller.stop();
      for (const ac of aborts) ac.abort();
      logs.stop();
      for (const c of Object.values(charts)) c.destroy();
    },
  };
}

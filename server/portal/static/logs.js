// A job's trainer logs: attempt and rank selectors, follow via SSE, and the trainer's JSON
// event records (worker/trainer_events.h: {"type":"metrics"}, {"type":"eval"},
// {"type":"event","event":...}) shown as one compact muted line each ("» step 20 · loss
// 2.31 · ..."; the raw record in its tooltip), or hidden with the "Show events" toggle;
// the human lines (stderr) as they are. A metrics or stopped_early record is not shown:
// rank 0 writes each as a human line of its own too ("step 5/60 loss ..."), so every step
// reads once, as in `llamafleet logs` (clients/cli/log_record.h).

import {api, query, sse} from './api.js';
import {h, setText, clear, fmtInt, fmtNum, fmtBytes} from './util.js';

const MAX_LOG_LINES = 5000;

const secs = (v) => `${Number(v || 0).toFixed(2)} s`;

// Whether `line` is a record the trainer also writes as a human line (metrics,
// stopped_early), which the view leaves out.
export function saidAsText(line) {
  if (!line.startsWith('{')) return false;
  let r;
  try { r = JSON.parse(line); } catch { return false; }
  return !!r && (r.type === 'metrics' || (r.type === 'event' && r.event === 'stopped_early'));
}

// One trainer event record → "step 20 · loss 2.31 · lr 1e-4 · 1,234 tok/s"; null for a
// line that is not one (plain text, other JSON).
export function describeRecord(line) {
  if (!line.startsWith('{')) return null;
  let r;
  try { r = JSON.parse(line); } catch { return null; }
  if (!r || typeof r !== 'object') return null;
  const parts = (...xs) => xs.filter((x) => x !== null && x !== undefined && x !== '').join(' · ');
  if (r.type === 'metrics') {
    return {kind: 'metrics', text: parts(`step ${fmtInt(r.step)}`, `loss ${fmtNum(r.loss)}`, `lr ${fmtNum(r.lr, 2)}`,
      r.grad_norm ? `grad norm ${fmtNum(r.grad_norm, 3)}` : null, `${fmtInt(Math.round(r.tokens_per_s || 0))} tok/s`,
      typeof r.mfu === 'number' ? `MFU ${fmtNum(r.mfu * 100, 3)}%` : null,
      r.peak_mem_bytes ? `peak ${fmtBytes(r.peak_mem_bytes)}` : null)};
  }
  if (r.type === 'eval') {
    return {kind: 'eval', text: parts(`eval after step ${fmtInt(r.step)}`, `loss ${fmtNum(r.loss)}`,
      `perplexity ${fmtNum(r.perplexity)}`, r.tokens ? `${fmtInt(r.tokens)} tokens` : null)};
  }
  if (r.type === 'sample') {
    // eval.samples: the text itself is in the Samples section.
    return {kind: 'sample', text: parts(`sample ${fmtInt(r.index)} after step ${fmtInt(r.step)}`, r.stop_reason,
      `${fmtInt(r.tokens)} tokens`)};
  }
  const ev = r.type === 'event' ? r.event : (r.event === 'error' ? 'exit' : null);  // an older trainer's error line
  if (!ev) return null;
  switch (ev) {
    case 'started':
      return {kind: ev, text: parts('started', `world ${r.world_size}`, r.parameters ? `${fmtInt(r.parameters)} parameters` : null,
        r.total_steps ? `${fmtInt(r.total_steps)} steps` : null, r.global_batch ? `batch ${fmtInt(r.global_batch)}` : null)};
    case 'resumed':
      return {kind: ev, text: parts(`resumed from step ${fmtInt(r.step)}`, r.path,
        (r.skipped || []).length ? `${r.skipped.length} newer skipped` : null)};
    case 'checkpoint_saved':
      return {kind: ev, text: parts(`checkpoint at step ${fmtInt(r.step)}`, fmtBytes(r.bytes), `loss ${fmtNum(r.loss)}`)};
    case 'phase':
      return {kind: ev, text: parts(`${String(r.phase || '').replaceAll('_', ' ')} ${secs(r.seconds)}`, r.detail)};
    case 'tokenizing':
      return {kind: ev, text: parts(`tokenizing ${r.path || ''}`,
        r.total_bytes ? `${Math.floor((100 * r.done_bytes) / r.total_bytes)}%` : fmtBytes(r.done_bytes))};
    case 'preempted':
      return {kind: ev, text: parts(`preempted at step ${fmtInt(r.step)}`, `loss ${fmtNum(r.loss)}`)};
    case 'finished':
      return {kind: ev, text: parts(`finished after ${fmtInt(r.steps)} steps`, `loss ${fmtNum(r.loss)}`,
        r.export_dir ? `exported to ${r.export_dir}` : null)};
    case 'exit':
      return {kind: ev, text: parts(`exit ${r.code || ''}`, r.message)};
    default: {
      const rest = Object.fromEntries(Object.entries(r).filter(([k]) => k !== 'type' && k !== 'event'));
      return {kind: 'event', text: parts(String(ev), Object.keys(rest).length ? JSON.stringify(rest) : null)};
    }
  }
}

// {el, update(job), load(), setFollow(on), stop()} for the job at API path `base`: update()
// grows the attempt and rank selectors as the job does; load() (again) reads the logs the
// selectors name, following them while "Follow" is on.
export function createLogView(base) {
  const attemptSel = h('select#log-attempt', h('option', {value: 0}, 'newest'));
  const rankSel = h('select#log-rank', h('option', {value: -1}, 'all ranks'));
  const follow = h('input#log-follow', {type: 'checkbox'});
  const showEvents = h('input#log-events', {type: 'checkbox', checked: true});
  const logStatus = h('span.muted.log-status', {'aria-live': 'polite'});
  const logBox = h('div#logs.logs', {tabindex: 0, role: 'log', 'aria-label': 'Trainer logs'});
  const el = h('div.log-view',
    h('div.toolbar',
      h('div.field', h('label', {for: 'log-attempt'}, 'Attempt'), attemptSel),
      h('div.field', h('label', {for: 'log-rank'}, 'Rank'), rankSel),
      h('div.field', follow, h('label', {for: 'log-follow'}, 'Follow')),
      h('div.field', {title: 'The trainer\'s metrics, eval and event records, one line each'},
        showEvents, h('label', {for: 'log-events'}, 'Show events')),
      logStatus),
    logBox);

  let logAbort = null;
  let logLines = 0;
  function appendChunk(chunk, showRank) {
    const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 24;
    const frag = document.createDocumentFragment();
    for (const line of chunk.lines || []) {
      if (saidAsText(line)) continue;
      const rec = describeRecord(line);
      const prefix = showRank ? h('span.rank', `[rank ${chunk.rank}] `) : null;
      frag.append(rec
        ? h('div.line.ev', {title: line, dataset: {kind: rec.kind}}, prefix, h('span.ev-mark', {'aria-hidden': 'true'}, '» '), rec.text)
        : h('div.line', prefix, line));
      logLines++;
    }
    logBox.append(frag);
    while (logLines > MAX_LOG_LINES) { logBox.firstChild.remove(); logLines--; }
    if (atBottom) logBox.scrollTop = logBox.scrollHeight;
  }

  async function load() {
    if (logAbort) logAbort.abort();
    const ac = new AbortController();
    logAbort = ac;
    clear(logBox);
    logLines = 0;
    const rank = Number(rankSel.value);
    const params = {attempt: attemptSel.value, rank, tail_lines: 500};
    const showRank = rank < 0;
    try {
      if (follow.checked) {
        setText(logStatus, 'following…');
        await sse(`${base}/logs${query({...params, follow: 'true'})}`, (ev) => {
          if (ev.event === 'log') appendChunk(ev.data, showRank);
        }, ac.signal);
        if (logAbort === ac) setText(logStatus, 'the job has ended; no more lines');
      } else {
        setText(logStatus, '');
        const res = await api(`${base}/logs${query(params)}`, {signal: ac.signal});
        for (const c of res.chunks || []) appendChunk(c, showRank);
        logBox.scrollTop = logBox.scrollHeight;
        if (!logLines) setText(logStatus, 'no log lines');
      }
    } catch (err) {
      if (err.name !== 'AbortError' && logAbort === ac) setText(logStatus, `logs: ${err.message}`);
    }
  }
  for (const x of [attemptSel, rankSel, follow]) x.addEventListener('change', load);
  // Hiding is a class on the box: no refetch, and the lines come back as they were.
  showEvents.addEventListener('change', () => logBox.classList.toggle('hide-events', !showEvents.checked));

  function update(job) {
    const attempts = Number(job.attempts || 0);
    while (attemptSel.options.length - 1 < attempts) {
      const n = attemptSel.options.length;
      attemptSel.append(h('option', {value: n}, `attempt ${n}`));
    }
    const res = job.spec?.resources || {};
    const world = (res.nodes || 1) * (res.gpus_per_node || 1);
    while (rankSel.options.length - 1 < world) {
      const r = rankSel.options.length - 1;
      rankSel.append(h('option', {value: r}, `rank ${r}`));
    }
  }

  return {
    el,
    update,
    load,
    setFollow(on) { follow.checked = on; },
    stop() { if (logAbort) logAbort.abort(); },
  };
}

// Workers: state, last heartbeat, running tasks, drain (reason, source, since), last
// pre-flight and last straggler flag (a badge), and per GPU the DCGM fields the old
// Grafana dashboard showed (utilisation, memory, temperature, power, SM clock, XID errors)
// with its health: gone, clocks throttled for heat or power, uncorrectable ECC errors.

// The clock throttle reasons that say a GPU is unwell (common/gpu_throttle.h); the other
// bits (idle, the power cap, ...) are normal.
const THROTTLES = [[0x8, 'hw slowdown'], [0x20, 'sw thermal'], [0x40, 'hw thermal'], [0x80, 'power brake']];

// What a GPU sample says is wrong, as [text, class]: ['ok', ''] when nothing is.
export function gpuHealth(g) {
  if (g.gone) return ['gone', 'bad'];
  const mask = Number(g.clock_throttle_reasons || 0);
  const problems = THROTTLES.filter(([bit]) => mask & bit).map(([, name]) => name);
  const ecc = Number(g.ecc_uncorrected_volatile || 0);
  if (ecc > 0) problems.unshift(`${fmtInt(ecc)} ECC`);
  return problems.length ? [problems.join(', '), ecc > 0 ? 'bad' : 'warn'] : ['ok', ''];
}

import {api} from './api.js';
import {h, setText, Poller, fmtBytes, fmtNum, fmtAgo, fmtFullTime, fmtInt} from './util.js';

export function mountWorkers(root, ctx) {
  const body = h('div.workers');
  const count = h('span.muted');
  const banner = h('div.banner.error', {role: 'alert', hidden: true});
  root.append(h('section.page', h('div.page-head', h('h1', 'Workers'), count), banner, body));
  const cards = new Map();  // worker id → {el, sig}

  function taskLinks(ids) {
    if (!ids || !ids.length) return [h('span.muted', 'idle')];
    // Task ids are "<job>-<attempt>-<node_rank>": link to the job.
    return ids.map((t) => h('a.task', {href: `#/jobs/${encodeURIComponent(String(t).split('-')[0])}`}, t));
  }

  function card(w) {
    const inv = w.inventory || {};
    const gpuInfo = new Map((inv.gpus || []).map((g) => [g.index, g]));
    const state = String(w.state || '').replace('WORKER_', '');
    const slots = (inv.gpus || []).length || inv.cpu_ranks || 0;
    const head = h('div.worker-head',
      h('h2', w.name || w.id), h('span.badge', {class: `badge ${state.toLowerCase()}`}, state),
      w.straggler ? h('span.badge.straggler', {title: w.straggler.reason || ''}, 'straggler') : null,
      h('span.muted', `${inv.host || ''}${inv.instance_type ? ` · ${inv.instance_type}` : ''}`),
      h('span.spacer'),
      h('span', {title: fmtFullTime(w.last_heartbeat)}, `heartbeat ${fmtAgo(w.last_heartbeat)}`));
    const facts = h('p.worker-facts',
      `${(inv.gpus || []).length ? `${inv.gpus.length} GPUs` : `CPU worker, ${inv.cpu_ranks || 0} ranks`} · ` +
      `${fmtInt(w.gpus_allocated || 0)} / ${fmtInt(slots)} in use · ${inv.cpus || 0} CPUs · ${fmtBytes(inv.memory_bytes)} RAM` +
      `${inv.efa_devices ? ` · ${inv.efa_devices} EFA` : ''}`,
      Object.keys(inv.labels || {}).length ? ` · ${Object.entries(inv.labels).map(([k, v]) => `${k}=${v}`).join(', ')}` : '',
      ' · tasks: ', taskLinks(w.running_task_ids));
    // Drained: no new placements (why, by whom, since when); the last pre-flight's checks.
    const health = [];
    if (w.drain) {
      health.push(h('p.worker-drain', h('span.badge.draining', 'drained'),
        ` by ${w.drain.source || '?'}: ${w.drain.reason || ''} · since `,
        h('span', {title: fmtFullTime(w.drain.since)}, fmtAgo(w.drain.since))));
    }
    if (w.preflight) {
      const checks = (w.preflight.checks || []).map((c) =>
        `${c.name} ${String(c.state || '').toLowerCase()}${c.detail ? ` (${c.detail})` : ''}`).join(' · ');
      health.push(h(w.preflight.passed ? 'p.muted.worker-preflight' : 'p.worker-preflight.bad',
        `pre-flight ${w.preflight.passed ? 'passed' : 'FAILED'} ${fmtAgo(w.preflight.time)} in ` +
        `${fmtNum(1000 * (w.preflight.seconds || 0), 3)} ms: ${checks}`));
    }
    if (w.straggler) {
      const s = w.straggler;
      health.push(h('p.worker-straggler', h('span.badge.straggler', 'straggler'),
        ` rank ${s.rank || 0} of job `, h('a', {href: `#/jobs/${encodeURIComponent(s.job_id || '')}`}, s.job_id || '?'),
        ` (${s.action || 'flag'}) `, h('span', {title: fmtFullTime(s.since)}, fmtAgo(s.since)), `: ${s.reason || ''}`));
    }
    const gpus = w.gpus || [];
    const table = gpus.length ? h('table.grid-table.compact.gpu-table',
      h('colgroup', ['4em', '16em', '10em', '16em', '6em', '6em', '7em', '6em', '4em', '10em'].map((w) => h('col', {style: {width: w}}))),
      h('thead', h('tr', ['GPU', 'Model', 'Utilisation', 'Memory', 'Temp', 'Power', 'SM clock', 'Mem copy', 'XID', 'Health'].map((t) => h('th', {scope: 'col'}, t)))),
      h('tbody', gpus.map((g) => {
        const info = gpuInfo.get(g.index) || {};
        const memPct = info.memory_bytes ? (100 * Number(g.memory_used_bytes || 0)) / Number(info.memory_bytes) : 0;
        return h('tr',
          h('td', String(g.index)),
          h('td', info.model || ''),
          h('td', h('span.meter', h('span.meter-fill', {style: {width: `${Math.min(100, g.gpu_util || 0)}%`}})), ` ${Math.round(g.gpu_util || 0)}%`),
          h('td', h('span.meter', h('span.meter-fill.mem', {style: {width: `${Math.min(100, memPct)}%`}})),
            ` ${fmtBytes(g.memory_used_bytes)} / ${fmtBytes(info.memory_bytes)}`),
          h('td.num', {class: g.temperature_c >= 85 ? 'num warn' : 'num'}, `${fmtNum(g.temperature_c, 3)} °C`),
          h('td.num', `${fmtNum(g.power_w, 3)} W`),
          h('td.num', `${fmtInt(Math.round(g.sm_clock_mhz || 0))} MHz`),
          h('td.num', `${Math.round(g.mem_copy_util || 0)}%`),
          h('td.num', {class: Number(g.xid_errors) ? 'num bad' : 'num'}, fmtInt(g.xid_errors || 0)),
          h('td.gpu-health', {class: `gpu-health ${gpuHealth(g)[1]}`.trim()}, gpuHealth(g)[0]));
      }))) : h('p.muted', (inv.gpus || []).length ? 'no GPU samples yet' : 'CPU worker: no GPU telemetry');
    return h('section.panel.worker', {dataset: {id: w.id}}, head, facts, ...health, table);
  }

  async function load() {
    try {
      const res = await api('/api/v1/workers');
      ctx.setConn(true);
      banner.hidden = true;
      const workers = (res.workers || []).slice().sort((a, b) => (a.name || '').localeCompare(b.name || ''));
      const ready = workers.filter((w) => w.state === 'WORKER_READY').length;
      setText(count, `${workers.length} workers, ${ready} ready`);
      const els = workers.map((w) => {
        // Heartbeat age changes every second: part of the signature, so the card redraws.
        const sig = JSON.stringify(w) + fmtAgo(w.last_heartbeat);
        let c = cards.get(w.id);
        if (!c || c.sig !== sig) {
          const el = card(w);
          if (c) c.el.replaceWith(el);
          c = {el, sig};
          cards.set(w.id, c);
        }
        return c.el;
      });
      const have = [...body.children];
      const want = els.length ? els : [h('p.muted', 'No workers have registered.')];
      if (want.length !== have.length || want.some((e, i) => e !== have[i])) body.replaceChildren(...want);
    } catch (err) {
      if (err instanceof TypeError) ctx.setConn(false);
      else if (err.httpStatus !== 401) { banner.hidden = false; setText(banner, `Cannot list workers: ${err.message}`); }
    }
  }
  const poller = new Poller(load, 3000).start();
  return {cleanup() { poller.stop(); }};
}

// Queues: depth (QUEUED jobs), running jobs, GPUs in use against the quota, and the GPU
// time and cost of the queue's jobs, all time (Queue.usage; "—" while none is recorded);
// CPU time where every worker the cluster lists is a CPU worker (clusterDevice).

import {api} from './api.js';
import {h, setText, Poller, fmtInt, fmtAgo, fmtFullTime, fmtGpuTime, fmtCost, clusterDevice} from './util.js';

export function mountQueues(root, ctx) {
  const tbody = h('tbody');
  const banner = h('div.banner.error', {role: 'alert', hidden: true});
  root.append(h('section.page', h('div.page-head', h('h1', 'Queues')), banner,
    h('div.table-wrap', h('table.grid-table.queues', {'aria-label': 'Queues'},
      h('colgroup', ['14em', '8em', '8em', 'auto', '12em', '10em', '8em'].map((w) => h('col', {style: {width: w}}))),
      h('thead', h('tr', ['Queue', 'Queued', 'Running', 'GPUs used / quota', 'Oldest queued', 'GPU time', 'Cost'].map((t, i) =>
        h('th', {scope: 'col', class: (i === 1 || i === 2 || i >= 5 ? 'num' : '') + (i === 5 ? ' time-head' : '')}, t)))),
      tbody))));

  let lastSig = '';
  async function load() {
    try {
      const [res, workers] = await Promise.all([api('/api/v1/queues'),
        api('/api/v1/workers').then((r) => r.workers || [], () => [])]);
      ctx.setConn(true);
      banner.hidden = true;
      const queues = res.queues || [];
      const device = clusterDevice(workers);
      const sig = device + JSON.stringify(queues) + queues.map((q) => fmtAgo(q.oldest_queued_time)).join();
      if (sig === lastSig) return;
      lastSig = sig;
      setText(root.querySelector('th.time-head'), `${device} time`);
      tbody.replaceChildren(...(queues.length ? queues.map((q) => {
        const used = Number(q.gpus_allocated || 0);
        const quota = Number(q.gpu_quota || 0);
        const u = q.usage;
        const link = (state) => `#/jobs?queue=${encodeURIComponent(q.name)}&state=${state}`;
        return h('tr', {dataset: {queue: q.name}},
          h('td', h('a', {href: `#/jobs?queue=${encodeURIComponent(q.name)}`}, q.name)),
          h('td.num', h('a', {href: link('QUEUED')}, fmtInt(q.queued))),
          h('td.num', h('a', {href: link('RUNNING')}, fmtInt(q.running))),
          h('td', quota ? h('span.meter.wide', h('span.meter-fill', {class: used >= quota ? 'meter-fill full' : 'meter-fill',
            style: {width: `${Math.min(100, (100 * used) / quota)}%`}})) : null,
          ` ${fmtInt(used)} / ${quota ? fmtInt(quota) : 'unlimited'}`),
          h('td', {title: fmtFullTime(q.oldest_queued_time)}, q.oldest_queued_time ? fmtAgo(q.oldest_queued_time) : '—'),
          h('td.num.gpu-time', {title: u && Number(u.failed_gpu_seconds) ? `${fmtGpuTime(u.failed_gpu_seconds, device)} in failed attempts` : ''},
            u ? fmtGpuTime(u.gpu_seconds ?? 0, device) : '—'),
          h('td.num.cost', {title: u && u.failed_cost !== undefined ? `${fmtCost(u.failed_cost)} in failed attempts` : ''},
            u ? fmtCost(u.cost) : '—'));
      }) : [h('tr.empty', h('td', {colspan: 7}, 'No queues yet: a queue appears with its first job or quota.'))]));
    } catch (err) {
      if (err instanceof TypeError) ctx.setConn(false);
      else if (err.httpStatus !== 401) { banner.hidden = false; setText(banner, `Cannot list queues: ${err.message}`); }
    }
  }
  const poller = new Poller(load, 3000).start();
  return {cleanup() { poller.stop(); }};
}

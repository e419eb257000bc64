// One sweep (#/sweeps/NAME): a row per point in index order with its parameters, state,
// progress, latest loss, best eval loss and why it waits (the SWEEP throttle, say). The points are the
// signed-in user's jobs labelled sweep=NAME (the label every point carries); with auth off,
// everyone's (the portal's "anonymous" owns none of the CLI's jobs). Every point
// starts ticked for "Compare" (compare.js); unticking one leaves it out.

import {api, query} from './api.js';
import {h, setText, Poller, fmtInt, fmtNum, stateBadge} from './util.js';
import {comparePath, MAX_JOBS} from './compare.js';

export function mountSweep(root, ctx, name) {
  const head = h('thead');
  const tbody = h('tbody');
  const summary = h('p#sweep-summary.muted', {'aria-live': 'polite'});
  const banner = h('div.banner.error', {role: 'alert', hidden: true});
  const unticked = new Set();  // job ids left out of the comparison
  let ids = [];                // the points' job ids, in index order
  const compareBtn = h('button#compare-sweep', {type: 'button', disabled: true,
    title: `Loss curves and settings of the ticked points side by side (at most ${MAX_JOBS})`,
    onclick: () => ctx.navigate(comparePath(ticked()))}, 'Compare');
  const ticked = () => ids.filter((id) => !unticked.has(id)).slice(0, MAX_JOBS);
  function updateCompare() {
    const n = ticked().length;
    setText(compareBtn, `Compare (${n})`);
    compareBtn.disabled = n < 2;
  }
  root.append(h('section.page', {'aria-labelledby': 'sweep-h'},
    h('div.page-head', h('h1#sweep-h', `Sweep ${name}`), h('span.spacer'), compareBtn), summary, banner,
    h('div.table-wrap', h('table.grid-table.sweep', {'aria-label': `Points of sweep ${name}`}, head, tbody))));

  let lastSig = '';
  async function load() {
    try {
      const owner = ctx.session.authEnabled ? ctx.session.user : undefined;
      const res = await api(`/api/v1/jobs${query({label: `sweep=${name}`, owner, page_size: 1000})}`);
      ctx.setConn(true);
      banner.hidden = true;
      const points = (res.jobs || []).filter((j) => j.spec?.sweep?.point)
        .sort((a, b) => (a.spec.sweep.point.index || 0) - (b.spec.sweep.point.index || 0));
      const sig = JSON.stringify(points.map((j) => [j.id, j.state, j.latest_metrics, j.pending, j.status_reason]));
      if (sig === lastSig) return;
      lastSig = sig;
      // The parameters, in the order the sweep numbers them: "training.lr=3.0e-4".
      const params = points.length ? (points[0].spec.sweep.point.values || []).map((v) => v.split('=')[0]) : [];
      const numeric = ['Step', 'Loss', 'Best eval loss'];
      ids = points.map((j) => j.id);
      head.replaceChildren(h('tr', h('th', {scope: 'col', title: 'Ticked points open together in Compare', style: {width: '2.6em'}},
        h('span', {'aria-hidden': 'true'}, '✓'), h('span.sr-only', 'Compare')),
      ['Point', ...params, 'State', ...numeric, 'Why'].map((t) =>
        h('th', {scope: 'col', class: numeric.includes(t) ? 'num' : ''}, t))));
      const counts = {};
      tbody.replaceChildren(...(points.length ? points.map((j) => {
        counts[j.state] = (counts[j.state] || 0) + 1;
        const values = (j.spec.sweep.point.values || []).map((v) => v.slice(v.indexOf('=') + 1));
        const m = j.latest_metrics || {};
        const step = Number(m.step || 0);
        const box = h('input', {type: 'checkbox', checked: !unticked.has(j.id), 'aria-label': `Compare point ${j.spec.name}`,
          onchange: () => { if (box.checked) unticked.delete(j.id); else unticked.add(j.id); updateCompare(); }});
        return h('tr', {dataset: {id: j.id}},
          h('td.pick', h('label.pick', box)),
          h('td', h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`}, j.spec.name)),
          ...values.map((v) => h('td', v)),
          h('td', stateBadge(j.state)),
          h('td.num', step ? `${fmtInt(step)} / ${fmtInt(m.total_steps || 0)}` : ''),
          h('td.num', step ? fmtNum(m.loss) : ''),
          h('td.num', m.best_eval_loss !== undefined ? fmtNum(m.best_eval_loss) : ''),
          h('td.muted', j.state === 'QUEUED' ? (j.pending?.message || '') : (j.status_reason || '')));
      }) : [h('tr.empty', h('td', {colspan: 7 + params.length}, ctx.session.authEnabled ? `You have no jobs in sweep ${name}.` : `No jobs in sweep ${name}.`))]));
      updateCompare();
      const total = points.length ? points[0].spec.sweep.point.points : 0;
      const limit = points.length ? points[0].spec.sweep.max_concurrent : 0;
      setText(summary, points.length
        ? `${total} points${limit ? `, at most ${limit} at once` : ''}: ` +
          Object.entries(counts).map(([s, n]) => `${n} ${s.toLowerCase()}`).join(', ')
        : '');
    } catch (err) {
      if (err instanceof TypeError) ctx.setConn(false);
      else if (err.httpStatus !== 401) { banner.hidden = false; setText(banner, `Cannot list the sweep: ${err.message}`); }
    }
  }
  const poller = new Poller(load, 2500).start();
  return {cleanup() { poller.stop(); }};
}

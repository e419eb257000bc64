// The compare view (#/compare?jobs=1,2,3): several jobs' loss curves on one chart (train
// loss solid, eval loss dashed with a circle per evaluation, one colour per job, a legend
// naming each job) and a table of the jobs side by side: state, final train loss, best
// eval loss, GPU time and cost, then their settings from the spec, the ones that differ
// across the jobs first, marked ≠ and highlighted. Refreshes until every job has ended.

import {api} from './api.js';
import {LineChart} from './chart.js';
import {evalPoints} from './job.js';
import {h, setText, Poller, fmtInt, fmtNum, fmtUsage, attemptsDevice, stateBadge, TERMINAL_STATES} from './util.js';

export const MAX_JOBS = 12;
const REFRESH_MS = 5000;
const COLORS = ['var(--c1)', 'var(--c4)', 'var(--c3)', 'var(--c2)', 'var(--c5)', 'var(--c6)', 'var(--c7)', 'var(--c8)'];

// The settings every comparison shows (when any of the jobs has a value), in this order,
// with their column headings; any other spec field is shown when it differs.
const KEY_FIELDS = [
  ['training.lr', 'lr'],
  ['training.lr_schedule.type', 'lr schedule'],
  ['training.lr_schedule.warmup_steps', 'warmup steps'],
  ['training.micro_batch_size', 'micro batch'],
  ['training.grad_accum', 'grad accum'],
  ['training.global_batch_size', 'global batch'],
  ['training.seq_len', 'seq len'],
  ['training.epochs', 'epochs'],
  ['training.max_steps', 'max steps'],
  ['training.weight_decay', 'weight decay'],
  ['training.seed', 'seed'],
  ['peft.method', 'peft'],
  ['peft.r', 'LoRA r'],
  ['peft.alpha', 'LoRA alpha'],
  ['fsdp.sharding', 'sharding'],
  ['fsdp.mixed_precision', 'precision'],
  ['resources.nodes', 'nodes'],
  ['resources.gpus_per_node', 'GPUs / node'],
  ['model.preset', 'model'],
  ['model.path', 'model path'],
  ['data.train_path', 'train data'],
  ['data.eval_path', 'eval data'],
];
// Fields that name the job rather than how it trains (every job has its own).
const SKIP = ['name', 'labels', 'sweep', 'depends_on', 'checkpoint.dir', 'output.export_dir'];

// "#/compare?jobs=…" path for these job ids.
export function comparePath(ids) { return `/compare?jobs=${ids.map(encodeURIComponent).join(',')}`; }

// The job ids of the route's `jobs` parameter: comma-separated, de-duplicated, at most MAX_JOBS.
export function jobIds(params) {
  const ids = (params.get('jobs') || '').split(',').map((s) => s.trim()).filter(Boolean);
  return [...new Set(ids)].slice(0, MAX_JOBS);
}

// A spec as {"training.lr": 3e-4, "peft.target_modules": "q_proj, v_proj", ...}: its leaves
// by dotted path, lists joined, the SKIP fields left out.
export function flattenSpec(obj, prefix = '', out = {}) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (SKIP.some((s) => key === s || key.startsWith(`${s}.`))) continue;
    if (v && typeof v === 'object' && !Array.isArray(v)) flattenSpec(v, key, out);
    else out[key] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

// Unset-looking values (as the gateway prints every field): '', null, *_UNSPECIFIED.
const blank = (v) => v === undefined || v === null || v === '' || /_UNSPECIFIED$/.test(String(v));
// Settings as written in a spec: 0.0003, not 3.00e-4; int64s arrive as strings.
const show = (v) => (blank(v) ? '—' : typeof v === 'number' ? String(Number(v.toPrecision(6))) : String(v));

// The columns for these flattened specs: [{field, label, differs}], differing ones first.
export function settingColumns(flats) {
  const keyed = new Map(KEY_FIELDS);
  const fields = [...KEY_FIELDS.map(([f]) => f)];
  for (const flat of flats) for (const f of Object.keys(flat)) if (!keyed.has(f) && !fields.includes(f)) fields.push(f);
  const cols = [];
  for (const field of fields) {
    const values = flats.map((flat) => (blank(flat[field]) ? '' : String(flat[field])));
    if (values.every((v) => v === '')) continue;
    const differs = new Set(values).size > 1;
    if (!keyed.has(field) && !differs) continue;
    cols.push({field, label: keyed.get(field) || field, differs});
  }
  return [...cols.filter((c) => c.differs), ...cols.filter((c) => !c.differs)];
}

export function mountCompare(root, ctx) {
  const ids = jobIds(ctx.params);
  const data = new Map(ids.map((id) => [id, {job: null, metrics: null, error: ''}]));
  const color = (id) => COLORS[ids.indexOf(id) % COLORS.length];

  const chart = new LineChart({title: 'Loss', height: 280, emptyText: 'no metrics yet'});
  chart.el.id = 'compare-chart';
  const banner = h('div.banner.error', {role: 'alert', hidden: true});
  const head = h('thead');
  const tbody = h('tbody');
  const note = h('p.muted.compare-note', h('span.differs-mark', '≠'),
    ' marks the settings that differ across these jobs (highlighted); the others are the same for all.');
  root.append(h('section.page.compare-page', {'aria-labelledby': 'compare-h'},
    h('div.page-head', h('h1#compare-h', `Compare ${ids.length} jobs`), h('span.spacer'),
      h('a', {href: '#/jobs'}, 'Back to jobs')),
    banner,
    ids.length < 2 ? h('p.banner', 'Tick two or more jobs on the Jobs page (or a sweep\'s page) and press Compare.') : null,
    h('section.panel', chart.el),
    h('section.panel', h('h2', 'Runs and settings'), note,
      h('div.table-wrap', h('table#compare-table.grid-table.compact.compare', {'aria-label': 'Compared jobs'}, head, tbody)))));

  function label(id) {
    const job = data.get(id).job;
    return `#${id} ${job?.spec?.name || ''}`.trim();
  }

  function renderChart() {
    const series = [];
    const legend = [];
    for (const id of ids) {
      const {job, metrics} = data.get(id);
      if (!job) continue;
      const c = color(id);
      legend.push({key: `job-${id}`, label: label(id), color: c});
      series.push({key: `train-${id}`, label: `${label(id)} train`, color: c,
        points: (metrics?.points || []).map((p) => ({x: Number(p.step), y: Number(p.loss)}))});
      const evals = evalPoints(metrics, job);
      if (job.spec?.data?.eval_path || job.spec?.data?.eval?.length || evals.length) {
        series.push({key: `eval-${id}`, label: `${label(id)} eval`, color: c, dashed: true, markers: true, points: evals});
      }
    }
    legend.push({key: 'style-train', label: 'train loss (solid)', color: 'var(--muted)'},
      {key: 'style-eval', label: 'eval loss (dashed, a circle per evaluation)', color: 'var(--muted)', dashed: true, markers: true});
    chart.setSeries(series, legend);
  }

  let lastSig = '';
  function renderTable() {
    const loaded = ids.filter((id) => data.get(id).job);
    const cols = settingColumns(loaded.map((id) => flattenSpec(data.get(id).job.spec)));
    const sig = JSON.stringify([cols, ids.map((id) => {
      const {job, error} = data.get(id);
      return [error, job?.state, job?.latest_metrics, job?.usage, data.get(id).device];
    })]);
    if (sig === lastSig) return;
    lastSig = sig;
    // CPU time when every job shown held only CPU ranks (attemptsDevice), else GPU time.
    const device = loaded.length && loaded.every((id) => data.get(id).device === 'CPU') ? 'CPU' : 'GPU';
    const fixed = ['Job', 'State', 'Step', 'Final train loss', 'Best eval loss', `${device} time`, 'Cost'];
    head.replaceChildren(h('tr',
      fixed.map((t, i) => h('th', {scope: 'col', class: i >= 2 && i <= 4 ? 'num' : ''}, t)),
      cols.map((c) => h('th', {scope: 'col', title: c.differs ? `${c.field}: differs across these jobs` : c.field,
        class: c.differs ? 'differs' : '', dataset: {field: c.field}},
      c.differs ? [h('span.differs-mark', {'aria-hidden': 'true'}, '≠ '), h('span.sr-only', 'differs: ')] : null, c.label))));
    tbody.replaceChildren(...ids.map((id) => {
      const {job, error} = data.get(id);
      const link = h('a', {href: `#/jobs/${encodeURIComponent(id)}`}, label(id));
      const others = ids.filter((x) => x !== id);
      const drop = others.length ? h('a.drop', {href: `#${comparePath(others)}`, title: `Leave job ${id} out`,
        'aria-label': `Leave job ${id} out of the comparison`}, '✕') : null;
      const who = h('td.job', h('span.key-swatch', {style: {background: color(id)}, 'aria-hidden': 'true'}), link, ' ', drop);
      if (!job) {
        return h('tr', {dataset: {id}}, who, h('td.muted', {colspan: fixed.length - 1 + cols.length}, error || 'loading…'));
      }
      const m = job.latest_metrics || {};
      const flat = flattenSpec(job.spec);
      const usage = fmtUsage(job.usage, data.get(id).device);
      const best = m.best_eval_loss ?? m.eval_loss;
      return h('tr', {dataset: {id}}, who,
        h('td', stateBadge(job.state)),
        h('td.num', Number(m.step) ? fmtInt(m.step) : '—'),
        h('td.num.final-loss', Number(m.step) ? fmtNum(m.loss) : '—'),
        h('td.num.best-eval', best !== undefined ? fmtNum(best) : '—'),
        h('td.usage', {title: usage.time}, usage.time),
        h('td.usage', {title: usage.cost}, usage.cost),
        cols.map((c) => h('td', {class: c.differs ? 'differs' : '', dataset: {field: c.field}, title: String(flat[c.field] ?? '')},
          show(flat[c.field]))));
    }));
  }

  async function load() {
    const workers = await api('/api/v1/workers').then((r) => r.workers || [], () => []);
    await Promise.all(ids.map(async (id) => {
      const d = data.get(id);
      if (d.job && TERMINAL_STATES.has(d.job.state) && d.final) return;  // nothing changes any more
      const base = `/api/v1/jobs/${encodeURIComponent(id)}`;
      try {
        const [job, metrics, attempts] = await Promise.all([api(base), api(`${base}/metrics?max_points=1000`),
          api(`${base}/attempts`).then((r) => r.attempts || [], () => [])]);
        d.final = Boolean(d.job && TERMINAL_STATES.has(d.job.state));
        Object.assign(d, {job, metrics, error: '', gone: false, device: attemptsDevice(attempts, workers)});
      } catch (err) {
        if (err instanceof TypeError) { ctx.setConn(false); return; }
        d.gone = err.httpStatus === 404;
        d.error = d.gone ? `job ${id} does not exist` : `cannot load job ${id}: ${err.message}`;
      }
    }));
    ctx.setConn(true);
    const errors = ids.map((id) => data.get(id).error).filter(Boolean);
    banner.hidden = !errors.length;
    setText(banner, errors.join('; '));
    renderChart();
    renderTable();
    if (ids.every((id) => data.get(id).final || data.get(id).gone)) poller.stop();
  }

  const poller = new Poller(load, REFRESH_MS);
  if (ids.length) poller.start();
  return {cleanup() { poller.stop(); chart.destroy(); }};
}

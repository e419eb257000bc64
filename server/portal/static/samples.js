// The job page's Samples section (eval.samples): what the model wrote for each prompt at an
// evaluation, one step at a time or two steps side by side. The steps come from
// GET .../samples?latest=true (its `steps` lists every step with samples); each shown step is
// fetched once with ?step=N (a step's samples do not change) and the latest again on each
// refresh while the job runs. Model output is text: it is set with textContent, never as HTML.

import {api, query} from './api.js';
import {fmtNum, h} from './util.js';

// "eos · 12 tokens · exact_match 1 · contains 1".
function sampleNote(s) {
  const scores = Object.entries(s.scores || {})
                     .sort(([a], [b]) => a.localeCompare(b))
                     .map(([k, v]) => `${k} ${fmtNum(v, 3)}`);
  return [s.stop_reason || '—', `${Number(s.tokens || 0)} tokens`, ...scores].join(' · ');
}

// The cell of one sample at one step: its text, and its stop reason, tokens and scores.
function sampleCell(step, s) {
  if (!s)
    return h(
        'td.sample', {dataset: {step: String(step)}}, h('span.muted', 'no sample at this step'));
  return h(
      'td.sample', {dataset: {step: String(step)}}, h('pre.sample-text', s.text || ''),
      h('div.sample-note.muted', sampleNote(s)));
}

// base: the job's API path (/api/v1/jobs/ID). refresh(running): reads the steps (and the
// latest step's samples); the section stays hidden while the job has none.
export function createSamplesView(base) {
  const byStep = new Map();  // step → [Sample] by index
  let steps = [];
  let shown = '';  // the rendered (step, compare, steps) signature
  const stepSel = h('select#samples-step', {'aria-label': 'Step'});
  const compareSel = h('select#samples-compare', {'aria-label': 'Compare with step'});
  const colgroup = h('colgroup');
  const head = h('thead');
  const body = h('tbody');
  const table = h('table#samples-table.grid-table.compact.samples', colgroup, head, body);
  const el =
      h('section.panel#samples', {hidden: true},
        h('h2', 'Samples', h('span.spacer'), h('label.inline', 'Step ', stepSel), ' ',
          h('label.inline', 'compare with ', compareSel)),
        h('div.table-wrap', table));

  function fillOptions(sel, values, none) {
    const want = [...(none ? [''] : []), ...values.map(String)];
    const have = [...sel.options].map((o) => o.value);
    if (want.join('|') === have.join('|')) return;
    const keep = sel.value;
    sel.replaceChildren(...want.map((v) => h('option', {value: v}, v === '' ? none : `step ${v}`)));
    if (want.includes(keep)) sel.value = keep;
  }

  async function load(step) {
    if (!step || byStep.has(step)) return;
    const res = await api(`${base}/samples${query({step})}`);
    byStep.set(step, res.samples || []);
  }

  function render() {
    const a = stepSel.value;
    const b = compareSel.value;
    const sig = `${a}|${b}|${steps.join(',')}|${(byStep.get(a) || []).length}|${
        (byStep.get(b) || []).length}`;
    if (sig === shown) return;
    shown = sig;
    const cols = [a, ...(b && b !== a ? [b] : [])];
    colgroup.replaceChildren(
        ...['3em', ...cols.map(() => 'auto'), 'auto'].map((w) => h('col', {style: {width: w}})));
    head.replaceChildren(
        h('tr', h('th', {scope: 'col'}, '#'), h('th', {scope: 'col'}, 'Prompt'),
          cols.map((st) => h('th', {scope: 'col', dataset: {step: st}}, `Step ${st}`))));
    const indexes = new Map();  // index → prompt (and reference)
    for (const st of cols)
      for (const s of byStep.get(st) || [])
        if (!indexes.has(s.index || 0)) indexes.set(s.index || 0, s);
    body.replaceChildren(...[...indexes.keys()].sort((x, y) => x - y).map((i) => {
      const first = indexes.get(i);
      const at = (st) => (byStep.get(st) || []).find((s) => (s.index || 0) === i);
      return h(
          'tr', {dataset: {index: String(i)}}, h('td.num', String(i)),
          h('td.prompt', h('pre.sample-text', first.prompt || ''),
            first.reference ? h('div.sample-note.muted', `reference: ${first.reference}`) : null),
          cols.map((st) => sampleCell(st, at(st))));
    }));
  }

  stepSel.addEventListener('change', () => load(stepSel.value).then(render).catch(() => {}));
  compareSel.addEventListener('change', () => load(compareSel.value).then(render).catch(() => {}));

  return {
    el,
    async refresh(running) {
      const res = await api(`${base}/samples${query({latest: 'true'})}`);
      const wasLatest = steps.length ? String(steps[steps.length - 1]) : '';
      steps = (res.steps || []).map(String);
      el.hidden = steps.length === 0;
      if (!steps.length) return;
      const latest = steps[steps.length - 1];
      if (running || !byStep.has(latest)) byStep.set(latest, res.samples || []);
      const newest = [...steps].reverse();
      fillOptions(stepSel, newest, null);
      fillOptions(compareSel, newest, '— none —');
      // Follow the latest step unless another one was picked.
      if (!stepSel.value || stepSel.value === wasLatest) stepSel.value = latest;
      await Promise.all([load(stepSel.value), load(compareSel.value)]);
      render();
    },
  };
}

// The DPO rewards chart's series from the metrics points (none when the job is not DPO).
export function dpoSeries(points) {
  const pts = points.filter((p) => p.dpo);
  const series = (f) => pts.map((p) => ({x: Number(p.step), y: Number(f(p.dpo) || 0)}));
  return pts.length ?
      [
        {key: 'chosen', label: 'chosen', color: 'var(--c1)', points: series((d) => d.chosen)},
        {key: 'rejected', label: 'rejected', color: 'var(--c4)', points: series((d) => d.rejected)},
        {
          key: 'margin',
          label: 'margin',
          color: 'var(--c2)',
          dashed: true,
          points: series((d) => d.margin)
        },
      ] :
      [];
}

// The summary's "DPO rewards" row: "chosen 1.2 · rejected -0.4 · accuracy 75% · margin 1.6".
export function dpoSummary(dpo) {
  if (!dpo) return null;
  return `chosen ${fmtNum(Number(dpo.chosen || 0))} · rejected ${
             fmtNum(Number(dpo.rejected || 0))} · ` +
      `accuracy ${Math.round(Number(dpo.accuracy || 0) * 100)}% · margin ${
             fmtNum(Number(dpo.margin || 0))}`;
}

// The jobs list: server-side filters, sort and pages (fast on 10,000+ jobs: the browser
// only ever holds one page), refreshed every 2.5 s by updating the rows that changed.
// Columns have fixed widths and rows a fixed height, so nothing moves when values change.
// Jobs ticked in the first column (kept for the browser tab, across pages and filters)
// open together in the compare view (#/compare?jobs=1,2,3; compare.js).

import {api, query} from './api.js';
import {h, setText, debounce, Poller, fmtInt, fmtNum, fmtTime, fmtFullTime, JOB_STATES} from './util.js';
import {comparePath} from './compare.js';

const PICKED_KEY = 'llamafleet.compare';
const COLUMNS = [
  {key: 'pick', label: 'Compare', width: '2.6em'},
  {key: 'id', label: 'ID', width: '5.5em', sort: 'create_time'},
  {key: 'name', label: 'Name', width: 'auto', sort: 'name'},
  {key: 'owner', label: 'Owner', width: '8em', sort: 'owner'},
  {key: 'queue', label: 'Queue', width: '8em', sort: 'queue'},
  {key: 'state', label: 'State', width: '8.5em', sort: 'state'},
  {key: 'priority', label: 'Prio', width: '4.5em', sort: 'priority', num: true},
  {key: 'progress', label: 'Progress', width: '11em'},
  {key: 'loss', label: 'Loss', width: '6em', num: true},
  {key: 'evalLoss', label: 'Eval loss', width: '6.5em', num: true},
  {key: 'created', label: 'Created', width: '8.5em', sort: 'create_time'},
];
const PAGE_SIZES = [25, 50, 100, 200, 500, 1000];
const POLL_MS = 2500;

function readFilters(params) {
  return {
    states: params.getAll('state').filter((s) => JOB_STATES.includes(s)),
    queue: params.get('queue') || '',
    owner: params.get('owner') || '',
    labels: params.getAll('label'),
    name: params.get('name') || '',
    orderBy: params.get('order_by') || '-create_time',
    pageSize: Number(params.get('page_size')) || 100,
  };
}

function filtersToHash(f) {
  return `/jobs${query({state: f.states, queue: f.queue, owner: f.owner, label: f.labels, name: f.name,
    order_by: f.orderBy === '-create_time' ? '' : f.orderBy, page_size: f.pageSize === 100 ? '' : f.pageSize})}`;
}

export function mountJobs(root, ctx) {
  let filters = readFilters(ctx.params);
  let tokens = [''];          // page tokens of the pages up to the current one ("previous" pops)
  let nextToken = '';
  let total = 0;
  let shown = [];             // jobs of the current page, in order
  let selected = -1;
  let loadSeq = 0;
  const rows = new Map();     // job id → {tr, cells, sig}
  // Ticked for comparison, in the order ticked.
  const picked = new Set(JSON.parse(sessionStorage.getItem(PICKED_KEY) || '[]'));

  // --- toolbar -----------------------------------------------------------------------
  const search = h('input#job-search', {type: 'search', placeholder: 'Search names  ( / )', value: filters.name,
    'aria-label': 'Search jobs by name', autocomplete: 'off'});
  const queueInput = h('input#filter-queue', {type: 'text', list: 'queue-names', value: filters.queue, placeholder: 'any'});
  const queueList = h('datalist#queue-names');
  const ownerInput = h('input#filter-owner', {type: 'text', value: filters.owner, placeholder: 'anyone'});
  const labelInput = h('input#filter-label', {type: 'text', value: filters.labels.join(', '), placeholder: 'k=v, k=v'});
  const sizeSelect = h('select#page-size', {'aria-label': 'Jobs per page'},
    PAGE_SIZES.map((n) => h('option', {value: n, selected: n === filters.pageSize}, `${n} / page`)));
  const stateBoxes = JOB_STATES.map((s) => h('input', {type: 'checkbox', value: s, checked: filters.states.includes(s)}));
  const stateChips = h('fieldset.chips', h('legend', 'State'),
    stateBoxes.map((box) => h('label.chip', {class: `chip state-${box.value.toLowerCase()}`}, box, box.value.toLowerCase())));

  const mine = h('button.btn-quiet', {type: 'button', title: 'Only my jobs'}, 'mine');
  const reset = h('button.btn-quiet', {type: 'button'}, 'Clear filters');

  const toolbar = h('div.toolbar',
    h('div.field.grow', search),
    h('div.field', h('label', {for: 'filter-queue'}, 'Queue'), queueInput, queueList),
    h('div.field', h('label', {for: 'filter-owner'}, 'Owner'), ownerInput, mine),
    h('div.field', h('label', {for: 'filter-label'}, 'Labels'), labelInput),
    h('div.field', sizeSelect),
    reset);

  // --- table -------------------------------------------------------------------------
  const headCells = COLUMNS.map((c) => {
    const th = h('th', {scope: 'col', class: c.num ? 'num' : ''});
    if (c.sort) {
      th.append(h('button.sort', {type: 'button', onclick: () => sortBy(c.sort), title: `Sort by ${c.label.toLowerCase()}`},
        c.label, h('span.sort-mark', {'aria-hidden': 'true'})));
    } else if (c.key === 'pick') {
      th.title = 'Tick jobs to compare them (x ticks the selected row, c compares)';
      th.append(h('span', {'aria-hidden': 'true'}, '✓'), h('span.sr-only', c.label));
    } else {
      th.append(c.label);
    }
    th.dataset.col = c.key;
    return th;
  });
  const tbody = h('tbody');
  const table = h('table.jobs.grid-table', {'aria-label': 'Jobs', 'aria-rowcount': 0},
    h('colgroup', COLUMNS.map((c) => h('col', {style: {width: c.width}}))),
    h('thead', h('tr', headCells)), tbody);
  const emptyRow = h('tr.empty', h('td', {colspan: COLUMNS.length}, 'No jobs match these filters.'));

  const banner = h('div.banner.error', {role: 'alert', hidden: true});
  const range = h('span#page-range.range', {'aria-live': 'polite'});
  const prev = h('button#prev-page', {type: 'button', onclick: () => prevPage(), title: 'Previous page (p)'}, '← Prev');
  const next = h('button#next-page', {type: 'button', onclick: () => nextPage(), title: 'Next page (n)'}, 'Next →');
  const pager = h('div.pager', range, h('span.spacer'), prev, next);

  const compareBtn = h('button#compare-jobs', {type: 'button', onclick: () => compare(),
    title: 'Loss curves and settings of the ticked jobs side by side (c)'});
  const unpickBtn = h('button#unpick-jobs.btn-quiet', {type: 'button', onclick: () => setPicked([])}, 'Untick all');
  root.append(h('section.page.jobs-page', {'aria-labelledby': 'jobs-h'},
    h('div.page-head', h('h1#jobs-h', 'Jobs'), h('span.spacer'), unpickBtn, compareBtn,
      h('a.btn-primary', {href: '#/submit'}, 'New job')),
    toolbar, stateChips, banner, h('div.table-wrap', table), pager));

  // --- behaviour ---------------------------------------------------------------------
  function setPicked(ids) {
    picked.clear();
    for (const id of ids) picked.add(id);
    savePicked();
  }
  function togglePicked(id, on) {
    if (on) picked.add(id); else picked.delete(id);
    savePicked();
  }
  function savePicked() {
    sessionStorage.setItem(PICKED_KEY, JSON.stringify([...picked]));
    for (const [id, row] of rows) row.cells.box.checked = picked.has(id);
    setText(compareBtn, `Compare (${picked.size})`);
    compareBtn.disabled = picked.size < 2;
    unpickBtn.hidden = picked.size === 0;
  }
  function compare() {
    if (picked.size >= 2) ctx.navigate(comparePath([...picked]));
  }
  function applyFilters() {
    history.replaceState(null, '', `#${filtersToHash(filters)}`);
    tokens = [''];
    selected = -1;
    reload();
  }
  function reload() {
    loadSeq++;
    poller.poke();
  }
  function sortBy(key) {
    filters.orderBy = filters.orderBy === `-${key}` ? key : `-${key}`;
    applyFilters();
  }
  function nextPage() {
    if (!nextToken) return;
    tokens.push(nextToken);
    selected = 0;
    reload();
  }
  function prevPage() {
    if (tokens.length < 2) return;
    tokens.pop();
    selected = 0;
    reload();
  }

  const onSearch = debounce(() => { filters.name = search.value.trim(); applyFilters(); }, 300);
  search.addEventListener('input', onSearch);
  search.addEventListener('keydown', (e) => { if (e.key === 'Enter') { onSearch.cancel(); filters.name = search.value.trim(); applyFilters(); } });
  const onText = debounce(() => {
    filters.queue = queueInput.value.trim();
    filters.owner = ownerInput.value.trim();
    filters.labels = labelInput.value.split(',').map((s) => s.trim()).filter((s) => s.includes('='));
    applyFilters();
  }, 400);
  for (const el of [queueInput, ownerInput, labelInput]) el.addEventListener('input', onText);
  for (const box of stateBoxes) {
    box.addEventListener('change', () => {
      filters.states = stateBoxes.filter((b) => b.checked).map((b) => b.value);
      applyFilters();
    });
  }
  sizeSelect.addEventListener('change', () => { filters.pageSize = Number(sizeSelect.value); applyFilters(); });
  mine.addEventListener('click', () => { ownerInput.value = ctx.session.user; onText(); });
  reset.addEventListener('click', () => {
    filters = readFilters(new URLSearchParams());
    search.value = queueInput.value = ownerInput.value = labelInput.value = '';
    for (const b of stateBoxes) b.checked = false;
    sizeSelect.value = '100';
    applyFilters();
  });

  function renderHead() {
    const desc = filters.orderBy.startsWith('-');
    const key = filters.orderBy.replace(/^-/, '');
    headCells.forEach((th, i) => {
      const c = COLUMNS[i];
      const active = c.sort === key;
      const mark = th.querySelector('.sort-mark');
      if (active) th.setAttribute('aria-sort', desc ? 'descending' : 'ascending');
      else th.removeAttribute('aria-sort');
      if (mark) mark.textContent = active ? (desc ? ' ▼' : ' ▲') : '';
    });
  }

  function cellsFor(job) {
    const m = job.latest_metrics || {};
    const hasEval = m.eval_loss !== undefined;
    const step = Number(m.step || 0);
    const totalSteps = Number(m.total_steps || 0);
    return {
      id: job.id,
      name: job.spec?.name || '',
      owner: job.owner,
      queue: job.spec?.queue || '',
      state: job.state,
      priority: job.spec?.priority || 0,
      progress: totalSteps ? `${fmtInt(step)} / ${fmtInt(totalSteps)}` : (step ? fmtInt(step) : ''),
      pct: totalSteps ? Math.min(100, (100 * step) / totalSteps) : 0,
      loss: step ? fmtNum(m.loss) : '',
      evalLoss: hasEval ? fmtNum(m.eval_loss) : '',
      evalTitle: hasEval ? `eval loss ${fmtNum(m.eval_loss)} after step ${fmtInt(m.eval_step || 0)}, best ${fmtNum(m.best_eval_loss ?? m.eval_loss)}` : '',
      created: fmtTime(job.create_time),
      createdTitle: fmtFullTime(job.create_time),
      reason: job.status_reason || '',
    };
  }

  function makeRow(id) {
    const tr = h('tr', {dataset: {id}, tabindex: -1});
    const cells = {};
    for (const c of COLUMNS) {
      const td = h('td', {class: c.num ? 'num' : '', dataset: {col: c.key}});
      cells[c.key] = td;
      tr.append(td);
    }
    cells.box = h('input', {type: 'checkbox', checked: picked.has(id), 'aria-label': `Compare job ${id}`,
      onchange: () => togglePicked(id, cells.box.checked)});
    cells.pick.append(h('label.pick', cells.box));
    cells.idLink = h('a', {href: `#/jobs/${encodeURIComponent(id)}`});
    cells.id.append(cells.idLink);
    cells.badge = h('span.badge');
    cells.state.append(cells.badge);
    cells.bar = h('span.bar');
    cells.progText = h('span.progress-text');
    cells.progress.append(h('span.progress', cells.bar), cells.progText);
    tr.addEventListener('click', (e) => {
      if (e.target.closest('a, label, input')) return;
      ctx.navigate(`/jobs/${encodeURIComponent(id)}`);
    });
    return {tr, cells, sig: ''};
  }

  function updateRow(row, v) {
    const sig = JSON.stringify(v);
    if (sig === row.sig) return;  // unchanged: no DOM writes at all
    row.sig = sig;
    const c = row.cells;
    setText(c.idLink, v.id);
    setText(c.name, v.name);
    c.name.title = v.reason ? `${v.name}\n${v.reason}` : v.name;
    setText(c.owner, v.owner);
    setText(c.queue, v.queue);
    setText(c.badge, v.state);
    c.badge.className = `badge state-${String(v.state).toLowerCase()}`;
    c.state.title = v.reason;
    setText(c.priority, v.priority);
    c.bar.style.width = `${v.pct}%`;
    setText(c.progText, v.progress);
    setText(c.loss, v.loss);
    setText(c.evalLoss, v.evalLoss);
    c.evalLoss.title = v.evalTitle;
    setText(c.created, v.created);
    c.created.title = v.createdTitle;
  }

  function render(res) {
    shown = res.jobs || [];
    nextToken = res.next_page_token || '';
    total = Number(res.total_size || 0);
    const seen = new Set();
    const trs = shown.map((job) => {
      let row = rows.get(job.id);
      if (!row) { row = makeRow(job.id); rows.set(job.id, row); }
      updateRow(row, cellsFor(job));
      seen.add(job.id);
      return row.tr;
    });
    for (const id of [...rows.keys()]) if (!seen.has(id)) rows.delete(id);
    const want = trs.length ? trs : [emptyRow];
    const have = [...tbody.children];
    if (want.length !== have.length || want.some((tr, i) => tr !== have[i])) tbody.replaceChildren(...want);
    table.setAttribute('aria-rowcount', String(shown.length));
    if (selected >= shown.length) selected = shown.length - 1;
    markSelected(false);
    const start = (tokens.length - 1) * filters.pageSize;
    setText(range, shown.length ? `${fmtInt(start + 1)}–${fmtInt(start + shown.length)} of ${fmtInt(total)}`
      : `0 of ${fmtInt(total)}`);
    range.dataset.page = String(tokens.length);  // 1-based page number, for tests and styling
    prev.disabled = tokens.length < 2;
    next.disabled = !nextToken;
    renderHead();
  }

  function markSelected(scroll) {
    [...tbody.children].forEach((tr, i) => {
      const on = i === selected && tr !== emptyRow;
      tr.classList.toggle('selected', on);
      if (on) tr.setAttribute('aria-selected', 'true'); else tr.removeAttribute('aria-selected');
      if (on && scroll) tr.scrollIntoView({block: 'nearest'});
    });
  }

  async function load() {
    const seq = loadSeq;
    const q = query({
      state: filters.states, queue: filters.queue, owner: filters.owner, label: filters.labels,
      name: filters.name, order_by: filters.orderBy, page_size: filters.pageSize,
      page_token: tokens[tokens.length - 1],
    });
    try {
      const res = await api(`/api/v1/jobs${q}`);
      if (seq !== loadSeq) return;
      banner.hidden = true;
      ctx.setConn(true);
      render(res);
    } catch (err) {
      if (seq !== loadSeq) return;
      if (err instanceof TypeError) ctx.setConn(false);
      else if (err.httpStatus !== 401) {
        banner.hidden = false;
        setText(banner, `Cannot list jobs: ${err.message}`);
      }
    }
  }

  const poller = new Poller(load, POLL_MS).start();
  api('/api/v1/queues').then((res) => {
    queueList.replaceChildren(...(res.queues || []).map((q) => h('option', {value: q.name})));
  }).catch(() => {});
  renderHead();
  savePicked();

  return {
    cleanup() { poller.stop(); onSearch.cancel(); onText.cancel(); },
    onParams(params) {
      filters = readFilters(params);
      search.value = filters.name;
      queueInput.value = filters.queue;
      ownerInput.value = filters.owner;
      labelInput.value = filters.labels.join(', ');
      sizeSelect.value = String(filters.pageSize);
      for (const b of stateBoxes) b.checked = filters.states.includes(b.value);
      tokens = [''];
      reload();
    },
    onKey(e) {
      switch (e.key) {
        case 'j': selected = Math.min(shown.length - 1, selected + 1); markSelected(true); return true;
        case 'k': selected = Math.max(0, selected - 1); markSelected(true); return true;
        case 'Enter':
          if (selected >= 0 && shown[selected]) { ctx.navigate(`/jobs/${encodeURIComponent(shown[selected].id)}`); return true; }
          return false;
        case 'x':
          if (selected >= 0 && shown[selected]) { togglePicked(shown[selected].id, !picked.has(shown[selected].id)); return true; }
          return false;
        case 'c': compare(); return true;
        case '/': search.focus(); search.select(); return true;
        case 'n': nextPage(); return true;
        case 'p': prevPage(); return true;
        default: return false;
      }
    },
  };
}

// A job's state timeline: its events in seq order, oldest at the top, of which only the
// newest NEWEST are shown until the user asks for the earlier ones, so the last event
// (how the job ended) is always in view without scrolling.

import {h, setText, fmtTime, fmtFullTime} from './util.js';

export const NEWEST = 6;

// An elastic gang's size change named by an event ("resized 3 → 2 nodes: ...", "resizing
// 2 → 3 nodes: ..." when it stops to grow, "elastic: started on 2 of 3 nodes"), or null.
export function resizeOf(reason) {
  const m = /\bresiz(?:ed|ing) (\d+) → (\d+) nodes/.exec(reason || '');
  if (m) return {from: Number(m[1]), to: Number(m[2])};
  const s = /elastic: started on (\d+) of (\d+) nodes/.exec(reason || '');
  return s ? {from: Number(s[2]), to: Number(s[1])} : null;
}

const stateBadge = (state) => h('span.badge', {class: `badge state-${String(state).toLowerCase()}`}, state);

function eventItem(ev) {
  const changed = ev.from_state !== ev.to_state;
  const fromKnown = ev.from_state && ev.from_state !== 'JOB_STATE_UNSPECIFIED';
  const resize = resizeOf(ev.reason);
  return h('li', {class: [changed ? 'changed' : '', resize ? 'resize' : '', ev.type === 'tokenizing' ? 'tokenizing' : '']
    .filter(Boolean).join(' '), dataset: {seq: ev.seq}},
    h('time', {datetime: ev.time, title: fmtFullTime(ev.time)}, fmtTime(ev.time)),
    h('span.ev-type', ev.type),
    resize ? h('span.badge.resize-badge', {title: 'elastic gang resized'}, `${resize.from} → ${resize.to} nodes`) : null,
    changed ? h('span.ev-states', fromKnown ? [stateBadge(ev.from_state), ' → '] : '→ ', stateBadge(ev.to_state)) : null,
    ev.reason ? h('div.ev-reason', ev.reason) : null);
}

// {el, add(event), lastSeq(), events()}: el is the panel's content (the list and
// its "earlier events" toggle); add() takes each JobEvent (JSON) once or more, in any order.
export function createTimeline() {
  const items = [];  // [{ev, li}] by seq; of a run of tokenizing events only the newest
  let expanded = false;
  const list = h('ol.timeline', {'aria-label': 'State timeline'});
  const toggle = h('button#timeline-earlier.btn-link', {type: 'button', hidden: true, 'aria-controls': 'timeline-list'});
  list.id = 'timeline-list';
  const el = h('div.timeline-wrap', toggle, list);

  toggle.addEventListener('click', () => {
    expanded = !expanded;
    render();
  });

  function render() {
    const hidden = expanded ? 0 : Math.max(0, items.length - NEWEST);
    const want = items.slice(hidden).map((x) => x.li);
    const have = [...list.children];
    if (want.length !== have.length || want.some((li, i) => li !== have[i])) list.replaceChildren(...want);
    toggle.hidden = items.length <= NEWEST;
    toggle.setAttribute('aria-expanded', String(expanded));
    setText(toggle, expanded ? `Show only the newest ${NEWEST}` : `Show ${hidden} earlier event${hidden === 1 ? '' : 's'}`);
    list.dataset.total = String(items.length);
  }

  function add(ev) {
    const seq = Number(ev.seq);
    if (items.some((x) => x.seq === seq)) return;
    let at = items.findIndex((x) => x.seq > seq);
    if (at < 0) at = items.length;
    if (ev.type === 'tokenizing') {
      if (items[at] && items[at].ev.type === 'tokenizing') return;  // a newer progress report is shown
      if (items[at - 1] && items[at - 1].ev.type === 'tokenizing') items.splice(--at, 1);
    }
    items.splice(at, 0, {seq, ev, li: eventItem(ev)});
    render();
  }

  render();
  return {
    el,
    add,
    lastSeq: () => (items.length ? items[items.length - 1].seq : 0),
    events: () => items.map((x) => x.ev),
  };
}

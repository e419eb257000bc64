// Small DOM and formatting helpers shared by the pages. No framework: pages build DOM
// with h() once and then update text/attributes in place, so live refreshes never
// rebuild what did not change (no flicker, no layout jumps, focus and selection kept).

// h('div.cls#id', {attr: v, onclick: fn}, ...children): one element.
export function h(tag, attrs, ...children) {
  const m = /^([a-z0-9-]+)?((?:[.#][\w-]+)*)$/i.exec(tag);
  const el = document.createElement(m[1] || 'div');
  for (const part of m[2].match(/[.#][\w-]+/g) || []) {
    if (part[0] === '.') el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs !== undefined && attrs !== null &&
      (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// Sets textContent only when it changed (keeps the DOM quiet during polling).
export function setText(el, text) {
  text = text == null ? '' : String(text);
  if (el.textContent !== text) el.textContent = text;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
}

export const TERMINAL_STATES = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
export const JOB_STATES = ['QUEUED', 'SCHEDULED', 'RUNNING', 'RESTARTING', 'PREEMPTING',
  'SUCCEEDED', 'FAILED', 'CANCELLED'];

export function stateBadge(state) {
  return h('span.badge', {class: `badge state-${(state || 'unknown').toLowerCase()}`}, state || '?');
}

const numberFormat = new Intl.NumberFormat('en-US');
export function fmtInt(n) {
  if (n === undefined || n === null || n === '') return '';
  return numberFormat.format(Number(n));
}

// 4 significant digits, exponent for tiny/huge values (learning rates, losses).
export function fmtNum(v, digits = 4) {
  if (v === undefined || v === null || v === '' || Number.isNaN(Number(v))) return '';
  v = Number(v);
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e6) return v.toExponential(digits - 2).replace('e+', 'e');
  return String(Number(v.toPrecision(digits)));
}

export function fmtBytes(n) {
  n = Number(n || 0);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(n < 10 ? 1 : 0) : n} ${units[i]}`;
}

// What held time was spent on, 'GPU' or 'CPU': usage counts GPUs, or CPU ranks on a CPU
// worker, alike. A worker (WorkerInfo, as /api/v1/workers lists it) is a CPU worker when
// it has CPU ranks and no GPUs.
const isCpuWorker = (w) => !(w.inventory?.gpus || []).length && Number(w.inventory?.cpu_ranks || 0) > 0;

// 'CPU' when every task of `attempts` (at least one) ran on a worker `workers` lists as a
// CPU worker; 'GPU' otherwise (a worker no longer listed included), as the CLI's
// describe and attempts decide it.
export function attemptsDevice(attempts, workers) {
  const cpu = new Set((workers || []).filter(isCpuWorker).flatMap((w) => [w.name, w.id]));
  const tasks = (attempts || []).flatMap((a) => a.tasks || []);
  return tasks.length && tasks.every((t) => cpu.has(t.worker)) ? 'CPU' : 'GPU';
}

// 'CPU' when every worker the cluster lists (at least one) is a CPU worker, else 'GPU':
// the unit of totals over many jobs (a queue's), which name no workers.
export function clusterDevice(workers) {
  return (workers || []).length && workers.every(isCpuWorker) ? 'CPU' : 'GPU';
}

// GPU time from seconds: "40 GPU-s", "12.5 GPU-min", "1.23 GPU-h"; "CPU-s" ... for
// device 'CPU'; "—" when unknown.
export function fmtGpuTime(seconds, device = 'GPU') {
  if (seconds === undefined || seconds === null || seconds === '' || Number.isNaN(Number(seconds))) return '—';
  const s = Number(seconds);
  if (s < 60) return `${Math.round(s)} ${device}-s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} ${device}-min`;
  return `${fmtNum(s / 3600, 3)} ${device}-h`;
}

// Money in the pricing table's currency: "$12.34", "$0.0042"; "—" when unknown (no price).
export function fmtCost(v) {
  if (v === undefined || v === null || v === '' || Number.isNaN(Number(v))) return '—';
  const n = Number(v);
  return n !== 0 && Math.abs(n) < 0.01 ? `$${n.toPrecision(2)}` : `$${n.toFixed(2)}`;
}

// A Usage message (Job.usage, Queue.usage; snake_case as the gateway prints it) as
// {time: "1.2 GPU-h (0.2 GPU-h in failed attempts)", cost: "$12.34 ($2.01 in failed attempts)"},
// "—" for what is not known (no usage recorded, no price for the workers); the time in
// `device` units (fmtGpuTime).
export function fmtUsage(u, device = 'GPU') {
  if (!u) return {time: '—', cost: '—'};
  const failed = Number(u.failed_gpu_seconds || 0);
  const time = fmtGpuTime(u.gpu_seconds ?? 0, device) + (failed > 0 ? ` (${fmtGpuTime(failed, device)} in failed attempts)` : '');
  const cost = u.cost === undefined ? '—'
    : fmtCost(u.cost) + (Number(u.failed_cost || 0) > 0 ? ` (${fmtCost(u.failed_cost)} in failed attempts)` : '');
  return {time, cost};
}

export function parseTime(ts) {
  if (!ts) return null;
  const t = Date.parse(ts);
  return Number.isNaN(t) || t <= 0 ? null : new Date(t);
}

const pad = (n) => String(n).padStart(2, '0');
// Compact local time: "14:03:22" today, "May 3 14:03" this year, else "2023-05-03".
export function fmtTime(ts) {
  const d = parseTime(ts);
  if (!d) return '';
  const now = new Date();
  const hms = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === now.toDateString()) return hms;
  if (d.getFullYear() === now.getFullYear()) {
    return `${d.toLocaleString('en-US', {month: 'short'})} ${d.getDate()} ${hms.slice(0, 5)}`;
  }
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

export function fmtFullTime(ts) {
  const d = parseTime(ts);
  return d ? d.toLocaleString() : '';
}

export function fmtAgo(ts, now = Date.now()) {
  const d = parseTime(ts);
  if (!d) return 'never';
  const s = Math.max(0, Math.round((now - d.getTime()) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function debounce(fn, ms) {
  let timer = 0;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

// A repeating task that never overlaps itself, pauses while the tab is hidden and can
// be poked to run now (e.g. when an event says something changed).
export class Poller {
  constructor(fn, intervalMs) {
    this.fn = fn;
    this.intervalMs = intervalMs;
    this.timer = 0;
    this.running = false;
    this.stopped = false;
    this.again = false;
    this.onVisibility = () => { if (!document.hidden) this.poke(); };
    document.addEventListener('visibilitychange', this.onVisibility);
  }
  start() { this.poke(); return this; }
  async poke() {
    if (this.stopped) return;
    if (this.running) { this.again = true; return; }
    clearTimeout(this.timer);
    this.running = true;
    try {
      await this.fn();
    } catch (e) {
      console.warn('poll failed', e);
    } finally {
      this.running = false;
    }
    if (this.stopped) return;
    if (this.again) { this.again = false; this.poke(); return; }
    this.timer = setTimeout(() => { if (!document.hidden) this.poke(); else this.schedule(); },
      this.intervalMs);
  }
  schedule() {
    this.timer = setTimeout(() => { if (!document.hidden) this.poke(); else this.schedule(); },
      this.intervalMs);
  }
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    document.removeEventListener('visibilitychange', this.onVisibility);
  }
}

// True when keys typed go into a text field (shortcuts must then stay out of the way);
// checkboxes, buttons and selects keep the shortcuts working.
const NON_TEXT_INPUTS = new Set(['checkbox', 'radio', 'button', 'submit', 'reset', 'range', 'color', 'file', 'image']);
export function isTyping(target) {
  if (!target || !target.tagName) return false;
  if (target.tagName === 'INPUT') return !NON_TEXT_INPUTS.has(target.type);
  return target.tagName === 'TEXTAREA' || target.isContentEditable;
}

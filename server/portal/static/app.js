// llamafleet portal: hash routes (#/jobs, #/jobs/ID, #/sweeps/NAME, #/compare?jobs=1,2,
// #/workers, #/queues, #/submit), sign-in with an API token, global keyboard shortcuts.
// Plain ES modules, no build step: the coordinator serves these files as they are.

import {api, getToken, setToken, clearToken, onUnauthorized} from './api.js';
import {isTyping} from './util.js';
import {mountJobs} from './jobs.js';
import {mountJob} from './job.js';
import {mountSweep} from './sweep.js';
import {mountCompare} from './compare.js';
import {mountWorkers} from './workers.js';
import {mountQueues} from './queues.js';
import {mountSubmit} from './submit.js';

// Who is signed in: {user, role: 'VIEWER'|'USER'|'ADMIN', authEnabled}.
const session = {user: '', role: '', authEnabled: true};

const routes = [
  {re: /^\/jobs\/([^/]+)$/, page: 'jobs', title: (m) => `Job ${m[1]}`, mount: (el, ctx, m) => mountJob(el, ctx, decodeURIComponent(m[1]))},
  {re: /^\/sweeps\/([^/]+)$/, page: 'jobs', title: (m) => `Sweep ${decodeURIComponent(m[1])}`, mount: (el, ctx, m) => mountSweep(el, ctx, decodeURIComponent(m[1]))},
  {re: /^\/compare$/, page: 'jobs', title: () => 'Compare jobs', mount: (el, ctx) => mountCompare(el, ctx)},
  {re: /^\/jobs$/, page: 'jobs', title: () => 'Jobs', mount: (el, ctx) => mountJobs(el, ctx)},
  {re: /^\/workers$/, page: 'workers', title: () => 'Workers', mount: (el, ctx) => mountWorkers(el, ctx)},
  {re: /^\/queues$/, page: 'queues', title: () => 'Queues', mount: (el, ctx) => mountQueues(el, ctx)},
  {re: /^\/submit$/, page: 'submit', title: () => 'Submit', mount: (el, ctx) => mountSubmit(el, ctx)},
];

const main = document.getElementById('main');
let current = null;  // {cleanup, onKey, path}

export function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/jobs';
  const q = raw.indexOf('?');
  return {path: q < 0 ? raw : raw.slice(0, q), params: new URLSearchParams(q < 0 ? '' : raw.slice(q + 1))};
}

export function navigate(path) {
  if (location.hash !== `#${path}`) location.hash = path;
  else route();
}

function setConn(ok, text) {
  const el = document.getElementById('conn');
  el.classList.toggle('down', !ok);
  el.textContent = ok ? '' : (text || 'connection lost, retrying…');
}

function route() {
  const {path, params} = parseHash();
  if (current && current.path === path && current.onParams) {
    // Same page, new query (filters): the page updates itself, keeping its DOM.
    current.onParams(params);
    return;
  }
  if (current && current.cleanup) current.cleanup();
  current = null;
  main.replaceChildren();
  let matched = null;
  let m = null;
  for (const r of routes) {
    m = r.re.exec(path);
    if (m) { matched = r; break; }
  }
  if (!matched) {
    navigate('/jobs');
    return;
  }
  document.title = `${matched.title(m)} · llamafleet`;
  for (const a of document.querySelectorAll('.topbar nav a')) {
    if (a.dataset.page === matched.page) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const ctx = {session, params, navigate, setConn};
  const handle = matched.mount(main, ctx, m) || {};
  current = Object.assign({path}, handle);
}

// --- sign-in --------------------------------------------------------------------------

let signingIn = null;
let started = false;  // until then start() handles a 401 itself

function showWho() {
  const who = document.getElementById('whoami');
  who.textContent = session.authEnabled ? `${session.user} · ${session.role.toLowerCase()}`
    : `${session.user} · auth off`;
  who.title = session.authEnabled ? 'Signed in with an API token'
    : 'The coordinator runs with --insecure-no-auth: everyone is an admin';
  document.getElementById('signout').hidden = !session.authEnabled;
}

function applyWho(who) {
  session.user = who.user || 'anonymous';
  session.role = who.role || 'VIEWER';
  session.authEnabled = who.auth_enabled !== false;
  showWho();
}

// Shows the sign-in dialog until a token works; resolves once signed in.
function signIn(message) {
  if (signingIn) return signingIn;
  const dialog = document.getElementById('signin');
  const form = document.getElementById('signin-form');
  const input = document.getElementById('signin-token');
  const error = document.getElementById('signin-error');
  error.textContent = message || '';
  input.value = '';
  signingIn = new Promise((resolve) => {
    const onSubmit = async (e) => {
      e.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      setToken(token);
      try {
        applyWho(await api('/api/v1/whoami'));
        form.removeEventListener('submit', onSubmit);
        dialog.close();
        main.focus();  // not back on "Sign out", where the dialog would return focus
        signingIn = null;
        resolve();
      } catch (err) {
        clearToken();
        error.textContent = err.httpStatus === 401 ? 'That token was not accepted.' : `Cannot sign in: ${err.message}`;
        input.select();
      }
    };
    form.addEventListener('submit', onSubmit);
  });
  if (!dialog.open) dialog.showModal();
  input.focus();
  return signingIn;
}

document.getElementById('signin').addEventListener('cancel', (e) => e.preventDefault());

onUnauthorized(async () => {
  if (signingIn || !started) return;
  clearToken();
  if (current && current.cleanup) current.cleanup();
  current = null;
  await signIn('Your session has ended or the token is not valid any more; sign in again.');
  route();
});

document.getElementById('signout').addEventListener('click', async () => {
  clearToken();
  if (current && current.cleanup) current.cleanup();
  current = null;
  main.replaceChildren();
  document.getElementById('whoami').textContent = '';
  await signIn();
  route();
});

// --- keyboard -------------------------------------------------------------------------

let gPending = 0;
document.addEventListener('keydown', (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented) return;
  if (document.querySelector('dialog[open]')) return;
  if (isTyping(e.target)) {
    if (e.key === 'Escape' && e.target.tagName !== 'TEXTAREA') {
      e.preventDefault();  // leave the field; do not also clear a search box
      e.target.blur();
    }
    return;
  }
  // Enter/space on a link or button activates it; page shortcuts must not steal that.
  if ((e.key === 'Enter' || e.key === ' ') && e.target.closest('a,button,summary,[role=button]')) return;
  if (gPending) {
    clearTimeout(gPending);
    gPending = 0;
    const to = {j: '/jobs', w: '/workers', q: '/queues', s: '/submit'}[e.key];
    if (to) { e.preventDefault(); navigate(to); }
    return;
  }
  if (e.key === 'g') {
    gPending = setTimeout(() => { gPending = 0; }, 1200);
    return;
  }
  if (e.key === '?') {
    document.getElementById('help').showModal();
    return;
  }
  if (current && current.onKey && current.onKey(e)) e.preventDefault();
});
document.getElementById('help-btn').addEventListener('click', () => document.getElementById('help').showModal());

// --- start ----------------------------------------------------------------------------

async function start() {
  for (;;) {
    try {
      applyWho(await api('/api/v1/whoami'));
      break;
    } catch (err) {
      if (err.httpStatus === 401) {
        if (!signingIn) clearToken();
        await signIn(getToken() ? 'That token was not accepted.' : '');
        break;
      }
      setConn(false, `cannot reach the coordinator (${err.message}); retrying…`);
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
  setConn(true);
  started = true;
  window.addEventListener('hashchange', route);
  route();
}

start();

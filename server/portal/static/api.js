// The HTTP/JSON API client: bearer token from sessionStorage, JSON errors turned into
// ApiError (with the server's field_violations), and server-sent events read through
// fetch() streams, because EventSource cannot send an Authorization header.

const TOKEN_KEY = 'llamafleet.token';

export function getToken() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(token) { sessionStorage.setItem(TOKEN_KEY, token); }
export function clearToken() { sessionStorage.removeItem(TOKEN_KEY); }

let unauthorizedHandler = null;
// Called (once per failing request) when the server answers 401: the app asks for a token.
export function onUnauthorized(fn) { unauthorizedHandler = fn; }

export class ApiError extends Error {
  constructor(httpStatus, body, fallback) {
    const err = (body && body.error) || {};
    super(err.message || fallback || `HTTP ${httpStatus}`);
    this.httpStatus = httpStatus;
    this.status = err.status || '';
    this.violations = err.field_violations || [];
  }
}

function headers(extra) {
  const h = Object.assign({}, extra);
  const token = getToken();
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

async function failure(res) {
  const text = await res.text().catch(() => '');
  let body = null;
  try { body = JSON.parse(text); } catch { /* not JSON */ }
  const err = new ApiError(res.status, body, text.trim().slice(0, 200) || res.statusText);
  if (res.status === 401 && unauthorizedHandler) unauthorizedHandler(err);
  return err;
}

// api('/api/v1/jobs', {method: 'POST', body: {...} | 'yaml text', contentType, signal, text})
// → the parsed JSON body (the body's text with `text: true`); throws ApiError on a non-2xx
// answer, TypeError on network errors.
export async function api(path, opts = {}) {
  const init = {method: opts.method || 'GET', headers: headers(), signal: opts.signal};
  if (opts.body !== undefined) {
    if (typeof opts.body === 'string') {
      init.body = opts.body;
      init.headers['Content-Type'] = opts.contentType || 'text/plain';
    } else {
      init.body = JSON.stringify(opts.body);
      init.headers['Content-Type'] = 'application/json';
    }
  }
  const res = await fetch(path, init);
  if (!res.ok) throw await failure(res);
  const text = await res.text();
  if (opts.text) return text;
  return text ? JSON.parse(text) : {};
}

// Query string from an object; arrays repeat the key (state=A&state=B); empty values skipped.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    for (const item of Array.isArray(v) ? v : [v]) {
      if (item !== undefined && item !== null && item !== '') q.append(k, item);
    }
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

// Reads a text/event-stream response and calls onEvent({event, data, id}) per event
// (data parsed as JSON when it is JSON). Resolves when the server ends the stream;
// rejects on network/HTTP errors; abort with `signal`.
export async function sse(path, onEvent, signal) {
  const res = await fetch(path, {headers: headers({Accept: 'text/event-stream'}), signal});
  if (!res.ok) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += value;
    // Events are separated by a blank line (\n\n, \r\n\r\n or \r\r).
    let m;
    while ((m = /\r\n\r\n|\n\n|\r\r/.exec(buffer))) {
      const block = buffer.slice(0, m.index);
      buffer = buffer.slice(m.index + m[0].length);
      const ev = parseEvent(block);
      if (ev) onEvent(ev);
    }
  }
}

function parseEvent(block) {
  let event = 'message';
  let id = '';
  const data = [];
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (!line || line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  if (!data.length) return null;
  const text = data.join('\n');
  let parsed = text;
  try { parsed = JSON.parse(text); } catch { /* plain text */ }
  return {event, data: parsed, id};
}

// Just enough YAML for the portal: print a job spec (JSON from the API) as the YAML the
// CLI and `POST /api/v1/jobs` accept, and find the editor line a server field path like
// "spec.training.lr" points at. Parsing stays on the server (the dry run), so the
// portal never disagrees with the coordinator about what a document means.

const PLAIN = /^[A-Za-z0-9_./@+-][A-Za-z0-9_ ./@+:=-]*$/;
const SPECIAL = /^(true|false|yes|no|on|off|null|~|y|n)$/i;

function scalar(v) {
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  const s = String(v);
  // int64 values arrive as strings ("40"); numbers print unquoted so int fields parse.
  if (/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(s)) return s;
  if (s !== '' && PLAIN.test(s) && !SPECIAL.test(s) && !/[ :]$/.test(s) && !/: /.test(s) &&
      !s.includes(' #')) {
    return s;
  }
  return JSON.stringify(s);
}

function isScalar(v) { return v === null || typeof v !== 'object'; }

// Block YAML; lists of scalars as flow lists ([0.9, 0.999]), empty maps as {}.
export function toYaml(value, indent = 0) {
  const pad = ' '.repeat(indent);
  if (Array.isArray(value)) {
    if (value.every(isScalar)) return `${pad}[${value.map(scalar).join(', ')}]\n`;
    return value.map((item) => {
      const body = toYaml(item, indent + 2);
      return `${pad}- ${body.slice(indent + 2)}`;
    }).join('');
  }
  if (!isScalar(value)) {
    let out = '';
    for (const [k, v] of Object.entries(value)) {
      const key = PLAIN.test(k) && !SPECIAL.test(k) ? k : JSON.stringify(k);
      if (isScalar(v)) out += `${pad}${key}: ${scalar(v)}\n`;
      else if (Array.isArray(v) && (v.length === 0 || v.every(isScalar))) out += `${pad}${key}: [${v.map(scalar).join(', ')}]\n`;
      else if (!Array.isArray(v) && Object.keys(v).length === 0) out += `${pad}${key}: {}\n`;
      else out += `${pad}${key}:\n${toYaml(v, indent + 2)}`;
    }
    return out;
  }
  return `${pad}${scalar(value)}\n`;
}

// The stored spec (JSON mapping, every primitive printed) reduced to what a person would
// write: zero values, empty strings/lists/maps and *_UNSPECIFIED enums dropped (they mean
// "default"; an UNSPECIFIED name is not even accepted on input). Label maps are kept as
// they are. The default checkpoint dir (<data dir>/checkpoints/<old job id>) is dropped
// too, so a resubmitted job does not share (and resume from) the old job's checkpoints.
export function specForResubmit(spec, jobId) {
  const prune = (v, key) => {
    if (key === 'labels' || key === 'node_labels') return v && Object.keys(v).length ? v : undefined;
    if (Array.isArray(v)) return v.length ? v : undefined;
    if (v && typeof v === 'object') {
      const out = {};
      for (const [k, x] of Object.entries(v)) {
        const p = prune(x, k);
        if (p !== undefined) out[k] = p;
      }
      return Object.keys(out).length ? out : undefined;
    }
    if (v === '' || v === 0 || v === '0' || v === null) return undefined;
    if (typeof v === 'string' && v.endsWith('_UNSPECIFIED')) return undefined;
    return v;
  };
  const out = prune(JSON.parse(JSON.stringify(spec || {})), '') || {};
  const dir = out.checkpoint && out.checkpoint.dir;
  if (dir && jobId && new RegExp(`/checkpoints/${jobId}/?$`).test(dir)) {
    delete out.checkpoint.dir;
    if (!Object.keys(out.checkpoint).length) delete out.checkpoint;
  }
  return out;
}

// --- Field path → line ----------------------------------------------------------------

function indentOf(line) { return line.length - line.trimStart().length; }
function isContent(line) {
  const t = line.trim();
  return t !== '' && !t.startsWith('#');
}

// Splits editor lines into YAML documents: [{start, end}] (0-based line ranges, end
// exclusive), separated by "---" lines. A top-level list document holds several jobs.
function documents(lines) {
  const docs = [];
  let start = 0;
  lines.forEach((line, i) => {
    if (/^---(\s|$)/.test(line)) {
      docs.push({start, end: i});
      start = i + 1;
    }
  });
  docs.push({start, end: lines.length});
  return docs.filter((d) => lines.slice(d.start, d.end).some(isContent));
}

// Finds `key:` among the direct children of the block lines[from, to) (the shallowest
// indentation in it, or items "- key:" of a list). Returns the line index or -1.
function findKey(lines, from, to, key) {
  let childIndent = Infinity;
  for (let i = from; i < to; i++) {
    if (isContent(lines[i])) childIndent = Math.min(childIndent, indentOf(lines[i]));
  }
  const re = new RegExp(`^(?:- )?["']?${key.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}["']?\\s*:(\\s|$)`);
  for (let i = from; i < to; i++) {
    if (isContent(lines[i]) && indentOf(lines[i]) === childIndent && re.test(lines[i].trim())) return i;
  }
  return -1;
}

function blockEnd(lines, keyLine, end) {
  const base = indentOf(lines[keyLine]);
  let i = keyLine + 1;
  while (i < end && (!isContent(lines[i]) || indentOf(lines[i]) > base)) i++;
  return i;
}

// The list items ("- ...") directly inside lines[from, to): their start lines.
function listItems(lines, from, to) {
  const items = [];
  let indent = -1;
  for (let i = from; i < to; i++) {
    const t = lines[i].trim();
    if (!isContent(lines[i])) continue;
    if (indent < 0) indent = indentOf(lines[i]);
    if (indentOf(lines[i]) === indent && t.startsWith('-')) items.push(i);
  }
  return items;
}

// Maps a field path from the server ("spec.training.lr", "jobs[1].spec.name",
// "training.betas[0]", "document 2: ..." paths of the parser) to a 1-based editor line,
// or 0 when nothing matches. A document is the spec itself or {spec: ...}; a flow
// mapping (`training: {lr: 0}`) resolves to its line. When a key is missing (a required
// field left out) the deepest enclosing key's line is returned.
export function lineForPath(text, path) {
  const lines = text.split('\n');
  let docIndex = 0;
  let m = /^jobs\[(\d+)\]\.?(.*)$/.exec(path);
  if (m) { docIndex = Number(m[1]); path = m[2]; }
  let docs = documents(lines);
  // One document holding a list of specs: each item is a job.
  let from, to;
  if (docs.length === 1 && docIndex > 0 || (docs.length === 1 && listItems(lines, docs[0].start, docs[0].end).length &&
      lines.slice(docs[0].start, docs[0].end).find(isContent).trim().startsWith('-'))) {
    const items = listItems(lines, docs[0].start, docs[0].end);
    if (!items.length) return 0;
    const k = Math.min(docIndex, items.length - 1);
    from = items[k];
    to = k + 1 < items.length ? items[k + 1] : docs[0].end;
    // Treat "- key: v" as if the dash were indentation.
    const copy = lines.slice();
    for (let i = from; i < to; i++) copy[i] = i === from ? copy[i].replace(/-/, ' ') : copy[i];
    return resolve(copy, from, to, path);
  }
  if (!docs.length) return 0;
  const doc = docs[Math.min(docIndex, docs.length - 1)];
  return resolve(lines, doc.start, doc.end, path);
}

function resolve(lines, from, to, path) {
  const segments = path.split('.').filter(Boolean).map((s) => s.replace(/\[\d+\]$/, ''));
  // "spec." prefix: the document is the spec itself unless it has a top-level spec key.
  if (segments[0] === 'spec' && findKey(lines, from, to, 'spec') < 0) segments.shift();
  let found = 0;
  for (let s = 0; s < segments.length; s++) {
    const key = segments[s];
    const line = findKey(lines, from, to, key);
    if (line < 0) break;
    found = line + 1;
    const rest = lines[line].trim().replace(/^(?:- )?["']?[^:]+["']?\s*:/, '').trim();
    if (rest.startsWith('{') || rest.startsWith('[')) return found;  // flow style: this line
    from = line + 1;
    to = blockEnd(lines, line, to);
  }
  return found;
}

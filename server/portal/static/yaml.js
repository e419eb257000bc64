// Just enough YAML for the portal: find the editor line a server field path like
// "spec.training.lr" points at. Parsing and printing stay on the server (the dry run,
// GET /api/v1/jobs/{id}/spec.yaml), so the portal never disagrees with the coordinator
// about what a document means.

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

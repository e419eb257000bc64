// Submit: a YAML editor (line numbers, Tab inserts two spaces) validated by the server as
// you type (POST /api/v1/jobs?dry_run=true, Content-Type application/yaml), with each
// field violation listed and its line marked in the editor. The server is the only
// parser, so what the editor accepts is exactly what the coordinator accepts.

import {api, query} from './api.js';
import {DERIVED_KEY, DRAFT_KEY} from './job.js';
import {debounce, h, setText} from './util.js';

// The example names paths under the coordinator's first path root (GET /api/v1/config), so
// it validates as it stands.
function example(root) {
  root = root.replace(/\/+$/, '');
  return `# A finetuning job (the same YAML \`llamafleet submit -f\` takes).
name: my-finetune
queue: default
labels: {team: nlp}
model:
  preset: tiny            # or path: ${root}/models/llama-2-7b-hf
data:
  train_path: ${root}/data/train.jsonl
  format: tokens          # text | prompt_completion | tokens
training:
  max_steps: 100
  micro_batch_size: 2
  seq_len: 128
  lr: 3.0e-4
  log_every: 1
fsdp:
  sharding: FULL_SHARD
  mixed_precision: fp32
resources:
  nodes: 1
  gpus_per_node: 1
`;
}

// A failed read is retried a few times (a busy coordinator, a dropped connection) before the
// example falls back to /shared, which the coordinator would refuse.
async function exampleRoot() {
  for (let attempt = 1; ; ++attempt) {
    try {
      const config = await api('/api/v1/config');
      return (config.path_roots || [])[0] || '/shared';
    } catch (err) {
      if (attempt >= 5 || err.httpStatus === 401 || err.httpStatus === 403) return '/shared';
      await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
    }
  }
}

function randomKey() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return `portal-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

export function mountSubmit(root, ctx) {
  const draft = sessionStorage.getItem(DRAFT_KEY);
  // A draft from a job's Resubmit: the job it derives from (cleared with the draft).
  let derivedFrom = draft ? sessionStorage.getItem(DERIVED_KEY) : null;
  let exampleText = example('/shared');  // until the coordinator's roots are known
  const gutter = h('div.gutter', {'aria-hidden': 'true'});
  const marks = h('div.marks', {'aria-hidden': 'true'});
  const editor = h('textarea#job-yaml', {spellcheck: false, wrap: 'off', autocapitalize: 'off', autocomplete: 'off',
    'aria-label': 'Job spec (YAML)', 'aria-describedby': 'editor-help validation'});
  editor.value = draft || exampleText;
  const status = h('div#validation.validation', {role: 'status', 'aria-live': 'polite'});
  const violationList = h('ul.violations');
  const submitBtn = h('button#submit-job.btn-primary', {type: 'button'}, 'Submit');
  const resetBtn = h('button.btn-quiet', {type: 'button'}, 'Example');
  const result = h('div.banner', {role: 'alert', hidden: true});

  root.append(h('section.page.submit-page',
    h('div.page-head', h('h1', 'Submit a job'), h('span.spacer'), resetBtn, submitBtn),
    h('p#editor-help.muted', 'YAML or JSON, validated by the coordinator as you type. ',
      h('kbd', 'Tab'), ' indents; ', h('kbd', 'Esc'), ' then ', h('kbd', 'Tab'), ' leaves the editor; ',
      h('kbd', 'Ctrl'), '+', h('kbd', 'Enter'), ' submits.'),
    result,
    h('div.editor-wrap', h('div.editor', gutter, h('div.editor-body', marks, editor)),
      h('aside.editor-side', status, violationList))));

  let markedLines = new Set();
  let idempotencyKey = randomKey();   // one per edit: a double-click submits once
  let validateSeq = 0;
  let escapeTab = false;
  if (ctx.session.role === 'VIEWER') {
    submitBtn.disabled = true;
    submitBtn.title = 'Viewers cannot submit jobs';
  }

  function lineCount() { return editor.value.split('\n').length; }
  function renderGutter() {
    const n = lineCount();
    if (gutter.children.length !== n) {
      const frag = document.createDocumentFragment();
      for (let i = gutter.children.length; i < n; i++) frag.append(h('div', String(i + 1)));
      gutter.append(frag);
      while (gutter.children.length > n) gutter.lastChild.remove();
    }
    [...gutter.children].forEach((el, i) => el.classList.toggle('bad', markedLines.has(i + 1)));
    syncScroll();
  }
  function renderMarks() {
    const lh = parseFloat(getComputedStyle(editor).lineHeight) || 20;
    const pad = parseFloat(getComputedStyle(editor).paddingTop) || 0;
    marks.replaceChildren(...[...markedLines].map((line) => h('div.mark', {dataset: {line},
      style: {top: `${pad + (line - 1) * lh}px`, height: `${lh}px`}})));
    editor.setAttribute('aria-invalid', markedLines.size ? 'true' : 'false');
    renderGutter();
  }
  function syncScroll() {
    gutter.style.transform = `translateY(${-editor.scrollTop}px)`;
    marks.style.transform = `translate(${-editor.scrollLeft}px, ${-editor.scrollTop}px)`;
  }
  editor.addEventListener('scroll', syncScroll);

  function goToLine(line) {
    const lines = editor.value.split('\n');
    let pos = 0;
    for (let i = 0; i < line - 1 && i < lines.length; i++) pos += lines[i].length + 1;
    editor.focus();
    editor.setSelectionRange(pos, pos + (lines[line - 1] || '').length);
    const lh = parseFloat(getComputedStyle(editor).lineHeight) || 20;
    editor.scrollTop = Math.max(0, (line - 3) * lh);
  }

  // The server's answer → status line, violation list and marked lines.
  // Each field violation carries its line in the file (the server parsed it); a YAML
  // syntax error has none and says "line N" in its message.
  function showErrors(err) {
    const violations = err.violations.length ? err.violations
      : err.message.split('; ').map((part) => ({field: '', description: part}));
    markedLines = new Set();
    const items = violations.map((v) => {
      let line = v.line || 0;
      const lm = /line (\d+)/.exec(v.description || '');
      if (!line && lm) line = Number(lm[1]);
      if (line) markedLines.add(line);
      const li = h('li', {dataset: {field: v.field, line}},
        v.field ? h('code', v.field) : null, v.field ? ': ' : null, v.description,
        line ? h('button.btn-link', {type: 'button', onclick: () => goToLine(line)}, ` line ${line}`) : null);
      return li;
    });
    violationList.replaceChildren(...items);
    status.className = 'validation bad';
    setText(status, violations.length === 1 ? '1 problem' : `${violations.length} problems`);
    renderMarks();
  }

  function showValid(res) {
    const job = res.job || {};
    const spec = job.spec || {};
    const r = spec.resources || {};
    markedLines = new Set();
    renderMarks();
    violationList.replaceChildren(
      h('li.ok-item', `${spec.name}: ${r.nodes || 1} node(s) × ${r.gpus_per_node || 1} rank(s), queue ${spec.queue}, ` +
        `${spec.training?.max_steps && Number(spec.training.max_steps) ? `${spec.training.max_steps} steps` : `${spec.training?.epochs || 1} epoch(s)`}`));
    status.className = 'validation ok';
    setText(status, 'Valid');
  }

  async function validate() {
    const seq = ++validateSeq;
    const text = editor.value;
    if (!text.trim()) {
      status.className = 'validation';
      setText(status, 'Empty');
      violationList.replaceChildren();
      return;
    }
    status.className = 'validation pending';
    setText(status, 'Checking…');
    try {
      const res = await api(
          `/api/v1/jobs${query({dry_run: 'true', derived_from: derivedFrom})}`,
          {method: 'POST', body: text, contentType: 'application/yaml'});
      if (seq === validateSeq) showValid(res);
    } catch (err) {
      if (seq !== validateSeq) return;
      if (err.httpStatus === 400) showErrors(err);
      else {
        status.className = 'validation bad';
        setText(status, `Cannot validate: ${err.message}`);
      }
    }
  }
  const validateSoon = debounce(validate, 400);

  editor.addEventListener('input', () => {
    sessionStorage.setItem(DRAFT_KEY, editor.value);
    idempotencyKey = randomKey();
    result.hidden = true;
    renderGutter();
    validateSoon();
  });
  editor.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') { escapeTab = true; return; }
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); submit(); return; }
    if (e.key === 'Tab' && !escapeTab && !e.ctrlKey && !e.altKey) {
      e.preventDefault();
      const {selectionStart: s, selectionEnd: end, value} = editor;
      if (e.shiftKey) {
        // Outdent the current line by up to two spaces.
        const lineStart = value.lastIndexOf('\n', s - 1) + 1;
        const remove = value.slice(lineStart, lineStart + 2).match(/^ {0,2}/)[0].length;
        if (remove) {
          editor.setRangeText('', lineStart, lineStart + remove, 'preserve');
          editor.setSelectionRange(Math.max(lineStart, s - remove), Math.max(lineStart, end - remove));
        }
      } else {
        editor.setRangeText('  ', s, end, 'end');
      }
      editor.dispatchEvent(new Event('input'));
      return;
    }
    escapeTab = false;
  });

  async function submit() {
    if (submitBtn.disabled) return;
    validateSoon.cancel();
    submitBtn.disabled = true;
    result.hidden = true;
    try {
      const res = await api(
          `/api/v1/jobs${query({idempotency_key: idempotencyKey, derived_from: derivedFrom})}`,
          {method: 'POST', body: editor.value, contentType: 'application/yaml'});
      sessionStorage.removeItem(DRAFT_KEY);
      sessionStorage.removeItem(DERIVED_KEY);
      ctx.navigate(`/jobs/${encodeURIComponent(res.job.id)}`);
    } catch (err) {
      submitBtn.disabled = false;
      result.hidden = false;
      result.className = 'banner error';
      setText(result, `Not submitted: ${err.message}`);
      if (err.httpStatus === 400) showErrors(err);
    }
  }
  submitBtn.addEventListener('click', submit);
  resetBtn.addEventListener('click', () => {
    derivedFrom = null;  // the example derives from no job
    sessionStorage.removeItem(DERIVED_KEY);
    editor.value = exampleText;
    editor.dispatchEvent(new Event('input'));
  });

  renderGutter();
  if (draft) validate();
  exampleRoot().then((root) => {
    const untouched = !draft && editor.value === exampleText;
    exampleText = example(root);
    if (untouched) {
      editor.value = exampleText;
      renderGutter();
      validate();
    }
  });
  editor.focus();
  return {cleanup() { validateSoon.cancel(); }};
}

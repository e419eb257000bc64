// A small SVG line chart: one or more series over training steps, axes with "nice" ticks,
// a legend, a hover readout, and in-place updates.
//
// Why hand-drawn SVG instead of a charting library: the portal needs one chart type
// (a line per metric over training steps) with at most a few thousand points per series
// (the metrics endpoint downsamples to <= 5,000). That is a few hundred lines here,
// with nothing to vendor, update or audit, no build step, and full control over the two
// things that matter on a live page: the chart keeps a fixed size (no layout jumps) and
// updates reuse the same SVG nodes (no flicker, hover state survives a refresh).

const SVG = 'http://www.w3.org/2000/svg';
const HEIGHT = 150;
const MARGIN = {left: 52, right: 10, top: 8, bottom: 20};

function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

// Ticks at 1, 2 or 5 × 10^k covering [lo, hi]; returns {lo, hi, ticks} extended to them.
export function niceTicks(lo, hi, count = 4, minStep = 0) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return {lo: 0, hi: 1, ticks: [0, 1]};
  if (hi - lo < 1e-12 * Math.max(1, Math.abs(hi))) {
    const pad = Math.abs(hi) * 0.05 || 1;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  // 2.5 only for real-valued axes: integer axes (steps) tick at 1, 2, 5 × 10^k.
  const mults = minStep ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
  const step = Math.max(minStep, mults.map((m) => m * mag).find((s) => s >= raw) || 10 * mag);
  const first = Math.floor(lo / step) * step;
  const last = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let v = first; v <= last + step / 2; v += step) ticks.push(Number(v.toPrecision(12)));
  return {lo: first, hi: last, ticks, step};
}

// Decimals needed to write `step` exactly (0.25 → 2, 0.005 → 3, 20 → 0).
export function decimalsOf(step) {
  for (let d = 0; d < 10; d++) {
    const scaled = step * 10 ** d;
    if (Math.abs(scaled - Math.round(scaled)) < 1e-6 * Math.max(1, scaled)) return d;
  }
  return 10;
}

// Tick labels show as many decimals as the tick step needs (10.372, 10.374, ... rather
// than 10.37 twice); readouts (no step) keep 4 significant digits.
function defaultFormat(v, step) {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-3) return v.toExponential(step ? 2 : 3).replace('e+', 'e');
  if (a >= 1e4) return `${Number((v / 1e3).toPrecision(step ? 4 : 4))}k`;
  if (step) return v.toFixed(decimalsOf(step));
  return String(Number(v.toPrecision(4)));
}

// A legend entry's line sample: solid or dashed, with a circle for a marked series. Plain
// HTML, so the chart's one <svg> stays the plot.
function swatch({color, dashed, markers}) {
  const el = document.createElement('span');
  el.className = 'swatch';
  el.setAttribute('aria-hidden', 'true');
  const line = document.createElement('span');
  line.className = dashed ? 'swatch-line dashed' : 'swatch-line';
  line.style.borderColor = color;
  el.append(line);
  if (markers) {
    const dot = document.createElement('span');
    dot.className = 'swatch-dot';
    dot.style.borderColor = color;
    el.append(dot);
  }
  return el;
}

export class LineChart {
  // title: heading; format(y, tickStep?): tick/readout text; color: CSS colour of the line
  // setData() draws; xLabel: name of the x value in the readout ("step"); emptyText: shown
  // without points; height: of the plot in px; legend: show the legend even for one series
  // (it always shows with several).
  constructor({title, format = defaultFormat, color = 'var(--accent)', xLabel = 'step', emptyText = 'no data yet',
    height = HEIGHT, legend = false}) {
    this.title = title;
    this.format = format;
    this.xLabel = xLabel;
    this.height = height;
    this.alwaysLegend = legend;
    this.single = {key: 'main', label: title, color};
    this.series = [];      // [{key, label, color, dashed, markers, points, g, path, marks, lastDot}]
    this.width = 0;
    this.hover_ = null;    // {s: series index, i: point index} under the pointer

    this.el = document.createElement('figure');
    this.el.className = 'chart';
    const caption = document.createElement('figcaption');
    this.titleEl = document.createElement('span');
    this.titleEl.className = 'chart-title';
    this.titleEl.textContent = title;
    this.readout = document.createElement('span');
    this.readout.className = 'chart-readout';
    caption.append(this.titleEl, this.readout);
    this.legend = document.createElement('ul');
    this.legend.className = 'chart-legend';
    this.legend.setAttribute('aria-label', `Legend of ${title}`);
    this.legend.hidden = true;

    this.svg = svg('svg', {height, role: 'img', 'aria-label': title});
    this.gridY = svg('g', {class: 'grid'});
    this.axisX = svg('g', {class: 'axis'});
    this.axisY = svg('g', {class: 'axis'});
    this.lines = svg('g', {class: 'lines'});
    this.hoverLine = svg('line', {class: 'hover-line', visibility: 'hidden'});
    this.hoverDot = svg('circle', {r: 3.5, class: 'hover-dot', visibility: 'hidden'});
    this.empty = svg('text', {class: 'empty', 'text-anchor': 'middle'});
    this.empty.textContent = emptyText;
    this.overlay = svg('rect', {class: 'overlay', fill: 'transparent'});
    this.svg.append(this.gridY, this.axisX, this.axisY, this.lines, this.hoverLine, this.hoverDot, this.empty, this.overlay);
    this.el.append(caption, this.svg, this.legend);

    this.overlay.addEventListener('pointermove', (e) => this.hover(e));
    this.overlay.addEventListener('pointerleave', () => this.hover(null));
    this.resizeObserver = new ResizeObserver(() => {
      const w = Math.floor(this.svg.getBoundingClientRect().width);
      if (w && w !== this.width) {
        this.width = w;
        this.render();
      }
    });
    this.resizeObserver.observe(this.svg);
  }

  // One series in the constructor's colour. points: [{x, y}] in arrival order. x may go
  // back (a restarted attempt resumes from an earlier checkpoint step): the line then
  // starts a new segment instead of zig-zagging.
  setData(points) { this.setSeries([{...this.single, points}]); }

  // series: [{key, label, color, dashed, markers, points}], drawn in this order (later on
  // top). `key` names a series across calls, so its SVG nodes are reused; `dashed` draws a
  // dashed line, `markers` a circle at every point (sparse series: evaluations). A series
  // without points keeps its legend entry, marked "none yet". legendItems: [{key, label,
  // color, dashed, markers}] to show instead of one entry per series (one per job, say).
  // The test hooks: the figure's data-points (the first series' points), each series'
  // <g data-key data-points>, each legend entry's <li data-key>.
  setSeries(list, legendItems = null) {
    const clean = list.map((s) => ({...s, points: (s.points || []).filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y))}));
    const ends = (pts) => (pts.length ? [pts.length, pts[0].x, pts[0].y, pts[pts.length - 1].x, pts[pts.length - 1].y] : [0]);
    const sig = JSON.stringify([clean.map((s) => [s.key, s.label, s.color, !!s.dashed, !!s.markers, ends(s.points)]), legendItems]);
    if (sig === this.sig) return;  // a refresh with nothing new: leave the SVG alone
    this.sig = sig;
    const old = new Map(this.series.map((s) => [s.key, s]));
    this.series = clean.map((s) => {
      const was = old.get(s.key);
      old.delete(s.key);
      const nodes = was || this.makeSeries();
      nodes.path.setAttribute('stroke', s.color);
      if (s.dashed) nodes.path.setAttribute('stroke-dasharray', '6 4'); else nodes.path.removeAttribute('stroke-dasharray');
      nodes.marks.setAttribute('stroke', s.color);
      nodes.lastDot.setAttribute('fill', s.color);
      nodes.g.dataset.key = s.key;
      nodes.g.dataset.points = String(s.points.length);
      return {...s, g: nodes.g, path: nodes.path, marks: nodes.marks, lastDot: nodes.lastDot};
    });
    for (const gone of old.values()) gone.g.remove();
    this.lines.replaceChildren(...this.series.map((s) => s.g));
    this.renderLegend(legendItems);
    this.hover_ = null;
    this.render();
  }

  makeSeries() {
    const g = svg('g', {class: 'series'});
    const path = svg('path', {class: 'line', fill: 'none'});
    const marks = svg('g', {class: 'marks', fill: 'var(--panel)'});
    const lastDot = svg('circle', {r: 2.5, class: 'dot'});
    g.append(path, marks, lastDot);
    return {g, path, marks, lastDot};
  }

  renderLegend(items) {
    const entries = items || this.series;
    this.legend.hidden = !(this.alwaysLegend || items || this.series.length > 1);
    this.legend.replaceChildren(...entries.map((s) => {
      const none = !items && !s.points.length;
      const li = document.createElement('li');
      li.dataset.key = s.key;
      if (none) li.className = 'none';
      const label = document.createElement('span');
      label.textContent = s.label;
      li.append(swatch(s), label);
      if (none) {
        const note = document.createElement('span');
        note.className = 'muted';
        note.textContent = ' (none yet)';
        li.append(note);
      }
      return li;
    }));
  }

  destroy() { this.resizeObserver.disconnect(); }

  render() {
    const height = this.height;
    const w = this.width || Math.floor(this.svg.getBoundingClientRect().width) || 400;
    this.svg.setAttribute('viewBox', `0 0 ${w} ${height}`);
    const all = this.series.flatMap((s) => s.points);
    const innerW = w - MARGIN.left - MARGIN.right;
    const innerH = height - MARGIN.top - MARGIN.bottom;
    this.overlay.setAttribute('x', MARGIN.left);
    this.overlay.setAttribute('y', MARGIN.top);
    this.overlay.setAttribute('width', Math.max(0, innerW));
    this.overlay.setAttribute('height', innerH);
    this.empty.setAttribute('x', MARGIN.left + innerW / 2);
    this.empty.setAttribute('y', MARGIN.top + innerH / 2);
    this.empty.style.display = all.length ? 'none' : '';
    this.el.dataset.points = String(this.series.length ? this.series[0].points.length : 0);

    let xMin = Infinity, xMax = -Infinity, yMin = Infinity, yMax = -Infinity;
    for (const p of all) {
      if (p.x < xMin) xMin = p.x;
      if (p.x > xMax) xMax = p.x;
      if (p.y < yMin) yMin = p.y;
      if (p.y > yMax) yMax = p.y;
    }
    if (!all.length) { xMin = 0; xMax = 10; yMin = 0; yMax = 1; }
    if (xMax === xMin) xMax = xMin + 1;
    const yt = niceTicks(yMin, yMax, 4);
    const xt = niceTicks(xMin, xMax, Math.max(2, Math.floor(innerW / 90)), 1);  // steps are integers
    const sx = (x) => MARGIN.left + ((x - xMin) / (xMax - xMin)) * innerW;
    const sy = (y) => MARGIN.top + (1 - (y - yt.lo) / (yt.hi - yt.lo)) * innerH;
    this.scale = {sx, sy};

    this.syncTicks(this.gridY, yt.ticks, (g, v) => {
      const y = sy(v);
      const [line, text] = g.children;
      line.setAttribute('x1', MARGIN.left);
      line.setAttribute('x2', MARGIN.left + innerW);
      line.setAttribute('y1', y);
      line.setAttribute('y2', y);
      text.setAttribute('x', MARGIN.left - 6);
      text.setAttribute('y', y + 3.5);
      text.setAttribute('text-anchor', 'end');
      text.textContent = this.format(v, yt.step);
    });
    const xTicks = xt.ticks.filter((v) => v >= xMin - 1e-9 && v <= xMax + 1e-9);
    this.syncTicks(this.axisX, xTicks, (g, v) => {
      const x = sx(v);
      const [line, text] = g.children;
      line.setAttribute('x1', x);
      line.setAttribute('x2', x);
      line.setAttribute('y1', MARGIN.top + innerH);
      line.setAttribute('y2', MARGIN.top + innerH + 4);
      text.setAttribute('x', x);
      text.setAttribute('y', height - 5);
      text.setAttribute('text-anchor', 'middle');
      text.textContent = defaultFormat(v);
    });
    // Axis base lines.
    if (!this.baseX) {
      this.baseX = svg('line', {class: 'base'});
      this.axisY.append(this.baseX);
    }
    this.baseX.setAttribute('x1', MARGIN.left);
    this.baseX.setAttribute('x2', MARGIN.left + innerW);
    this.baseX.setAttribute('y1', MARGIN.top + innerH);
    this.baseX.setAttribute('y2', MARGIN.top + innerH);

    for (const s of this.series) this.renderSeries(s, sx, sy);
    const described = this.series.map((s) => (s.points.length
      ? `${s.label}: ${s.points.length} points, latest ${this.format(s.points[s.points.length - 1].y)} at ${this.xLabel} ${s.points[s.points.length - 1].x}`
      : `${s.label}: none yet`));
    this.svg.setAttribute('aria-label', all.length ? `${this.title}. ${described.join('; ')}` : `${this.title}: no data yet`);
    this.showReadout();
  }

  renderSeries(s, sx, sy) {
    let d = '';
    let prevX = -Infinity;
    for (const p of s.points) {
      d += `${p.x < prevX || !d ? 'M' : 'L'}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`;
      prevX = p.x;
    }
    s.path.setAttribute('d', d || 'M0,0');
    s.path.style.display = d ? '' : 'none';
    const marks = s.markers ? s.points : [];
    while (s.marks.children.length < marks.length) s.marks.append(svg('circle', {r: 3}));
    while (s.marks.children.length > marks.length) s.marks.lastChild.remove();
    marks.forEach((p, i) => {
      s.marks.children[i].setAttribute('cx', sx(p.x).toFixed(1));
      s.marks.children[i].setAttribute('cy', sy(p.y).toFixed(1));
    });
    const last = s.points[s.points.length - 1];
    s.lastDot.style.display = last && !s.markers ? '' : 'none';
    if (last) {
      s.lastDot.setAttribute('cx', sx(last.x));
      s.lastDot.setAttribute('cy', sy(last.y));
    }
  }

  // Reuses one <g><line/><text/></g> per tick; adds or removes only the difference.
  syncTicks(group, values, update) {
    while (group.children.length < values.length) {
      const g = svg('g');
      g.append(svg('line'), svg('text'));
      group.append(g);
    }
    while (group.children.length > values.length) group.lastChild.remove();
    values.forEach((v, i) => update(group.children[i], v));
  }

  // The point nearest the pointer, of any series (distance on screen).
  hover(e) {
    this.hover_ = null;
    if (e && this.scale) {
      const rect = this.svg.getBoundingClientRect();
      const vbW = this.width || rect.width;
      const px = ((e.clientX - rect.left) / rect.width) * vbW;
      const py = ((e.clientY - rect.top) / rect.height) * this.height;
      let bestDist = Infinity;
      this.series.forEach((s, si) => s.points.forEach((p, i) => {
        const dist = Math.hypot(this.scale.sx(p.x) - px, (this.scale.sy(p.y) - py) / 4);
        if (dist <= bestDist) { bestDist = dist; this.hover_ = {s: si, i}; }
      }));
    }
    this.showReadout();
  }

  // "step 20: 2.31" (with several series: "step 20: 2.31 · eval loss"); without hover the
  // first series' latest point.
  showReadout() {
    const h = this.hover_;
    const hovering = Boolean(h && this.series[h.s] && this.series[h.s].points[h.i]);
    for (const el of [this.hoverLine, this.hoverDot]) el.setAttribute('visibility', hovering ? 'visible' : 'hidden');
    const s = hovering ? this.series[h.s] : this.series.find((x) => x.points.length);
    if (!s) { this.readout.textContent = ''; return; }
    const p = hovering ? s.points[h.i] : s.points[s.points.length - 1];
    if (hovering) {
      const x = this.scale.sx(p.x), y = this.scale.sy(p.y);
      this.hoverLine.setAttribute('x1', x);
      this.hoverLine.setAttribute('x2', x);
      this.hoverLine.setAttribute('y1', MARGIN.top);
      this.hoverLine.setAttribute('y2', this.height - MARGIN.bottom);
      this.hoverDot.setAttribute('cx', x);
      this.hoverDot.setAttribute('cy', y);
      this.hoverDot.setAttribute('fill', s.color);
    }
    const which = this.series.length > 1 ? ` · ${s.label}` : '';
    this.readout.textContent = `${hovering ? '' : 'latest '}${this.xLabel} ${p.x}: ${this.format(p.y)}${which}`;
  }
}

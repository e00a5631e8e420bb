// Small SVG charts: lines over steps, bars with intervals, a scatter. Text goes in as text nodes only.

import {fmt, fmtStep, h, hideTooltip, s, showTooltip} from './dom.js';
import {MARKS, seriesColor} from './scales.js';

const M = {l: 56, r: 14, t: 12, b: 38};
// The mark (colours.json) a rule of each class is drawn in, inline (style.css keeps only its dashes); a rule's own
// color wins, and a rule of another class keeps style.css's grey.
const RULE_MARKS = {zero: 'zero', delta: 'delta', 'hline-alert': 'alert', 'hline-soft': 'reference'};
const LABEL_H = 13; // a rule label's height (style.css: 11px text), the least step between two labels' baselines

/** A chart width that fills a card body (minus its padding), within limits. */
export function chartWidth(el, fallback = 520) {
  const w = el.clientWidth - 28;
  return w > 300 ? Math.min(w, 900) : fallback;
}

export function niceTicks(lo, hi, count = 5) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (hi === lo) return [lo];
  const span = hi - lo;
  const step0 = span / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(step0));
  const err = step0 / mag;
  const step = mag * (err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

function extent(arrays, extra = []) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const a of arrays)
    for (const v of a)
      if (Number.isFinite(v)) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
  for (const v of extra)
    if (Number.isFinite(v)) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  if (lo === Infinity) return [0, 1];
  if (lo === hi) return [lo - (Math.abs(lo) || 1) * 0.05, hi + (Math.abs(hi) || 1) * 0.05];
  return [lo, hi];
}

function axes(svg, W, H, xs, ys, xTicks, yTicks, xFmt, yFmt, xLabel, yLabel) {
  const g = s('g', {class: 'axes'});
  for (const t of yTicks) {
    const y = ys(t);
    g.append(s('line', {class: 'grid', x1: M.l, x2: W - M.r, y1: y, y2: y}));
    g.append(s('text', {class: 'tick-label', x: M.l - 6, y: y + 4, 'text-anchor': 'end'}, yFmt(t)));
  }
  for (const t of xTicks) {
    const x = xs(t);
    g.append(s('line', {class: 'tick', x1: x, x2: x, y1: H - M.b, y2: H - M.b + 4}));
    g.append(s('text', {class: 'tick-label', x, y: H - M.b + 16, 'text-anchor': 'middle'}, xFmt(t)));
  }
  g.append(s('line', {class: 'axis', x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b}));
  if (xLabel)
    g.append(s('text', {class: 'axis-label', x: (M.l + W - M.r) / 2, y: H - 4, 'text-anchor': 'middle'}, xLabel));
  if (yLabel)
    g.append(
      s(
        'text',
        {class: 'axis-label', transform: `translate(12 ${(M.t + H - M.b) / 2}) rotate(-90)`, 'text-anchor': 'middle'},
        yLabel,
      ),
    );
  svg.append(g);
}

function pathOf(xs, ys, X, Y) {
  let d = '';
  let pen = false;
  for (let i = 0; i < xs.length; i++) {
    const y = ys[i];
    if (!Number.isFinite(y) || !Number.isFinite(xs[i])) {
      pen = false;
      continue;
    }
    d += `${pen ? 'L' : 'M'}${X(xs[i]).toFixed(1)} ${Y(y).toFixed(1)}`;
    pen = true;
  }
  return d;
}

function nearestIndex(xs, x) {
  let lo = 0;
  let hi = xs.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] <= x) lo = mid;
    else hi = mid;
  }
  return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
}

// A filled band between lo and hi over the runs of xs where all three are finite.
function bandPath(xs, lo, hi, X, Y) {
  let d = '';
  let run = [];
  const flush = () => {
    if (run.length > 1) {
      d += run.map((i, k) => `${k ? 'L' : 'M'}${X(xs[i]).toFixed(1)} ${Y(hi[i]).toFixed(1)}`).join('');
      const back = run.slice().reverse();
      d += back.map((i) => `L${X(xs[i]).toFixed(1)} ${Y(lo[i]).toFixed(1)}`).join('');
      d += 'Z';
    }
    run = [];
  };
  for (let i = 0; i < xs.length; i++) {
    if (Number.isFinite(xs[i]) && Number.isFinite(lo[i]) && Number.isFinite(hi[i])) run.push(i);
    else flush();
  }
  flush();
  return d;
}

/**
 * The baseline of each rule's label (null where it has none): just above its rule, or, where that would overlap
 * the label above, just below its rule and clear of that label; then up again where that leaves the plot. So the
 * labels of close rules never overlap.
 */
function ruleLabelYs(rules, Y, bottom) {
  const out = rules.map(() => null);
  const order = rules
    .map((_, i) => i)
    .filter((i) => rules[i].label && Number.isFinite(rules[i].y))
    .sort((a, b) => Y(rules[a].y) - Y(rules[b].y));
  let prev = -Infinity;
  for (const i of order) {
    const y = Y(rules[i].y);
    prev = out[i] = y - 5 >= prev + LABEL_H ? y - 5 : Math.max(y + LABEL_H, prev + LABEL_H);
  }
  let next = Infinity;
  for (const i of order.reverse()) next = out[i] = Math.min(out[i], next - LABEL_H, bottom);
  return out;
}

/**
 * Lines over a shared x (steps). series: [{name, color, xs, ys, dashed}]; bands: [{name, color, xs, lo, hi, id}]
 * filled behind the lines (intervals, ranges); marker: an x to highlight (move it later with the returned
 * element's setMarker(x), without redrawing); hline: {y, label, cls, id}, and more in hlines; onPick(x) when clicked.
 */
export function lineChart({
  series,
  bands = [],
  width = 520,
  height = 240,
  xLabel = 'step',
  yLabel = '',
  marker,
  hline,
  hlines = [],
  xFormat = fmtStep,
  yFormat = (v) => fmt(v, 3),
  legend = series.length > 1,
  onPick,
  id,
}) {
  const W = width;
  const H = height;
  const rules = (hline ? [hline] : []).concat(hlines);
  const [x0, x1] = extent(series.map((sr) => sr.xs));
  const [yl, yh] = extent(
    series.map((sr) => sr.ys).concat(bands.flatMap((b) => [b.lo, b.hi])),
    rules.map((r) => r.y),
  );
  const pad = (yh - yl) * 0.06;
  const y0 = yl - pad;
  const y1 = yh + pad;
  const X = (v) => M.l + ((v - x0) / (x1 - x0 || 1)) * (W - M.l - M.r);
  const Y = (v) => H - M.b - ((v - y0) / (y1 - y0 || 1)) * (H - M.t - M.b);
  const svg = s('svg', {class: 'chart line-chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: id || null});
  axes(
    svg,
    W,
    H,
    X,
    Y,
    niceTicks(x0, x1, Math.max(2, Math.floor(W / 110))),
    niceTicks(y0, y1, 4),
    xFormat,
    yFormat,
    xLabel,
    yLabel,
  );
  for (const b of bands) {
    svg.append(
      s('path', {
        class: 'band',
        id: b.id || null,
        d: bandPath(b.xs, b.lo, b.hi, X, Y),
        fill: b.color,
        'fill-opacity': b.opacity || 0.25,
        stroke: 'none',
      }),
    );
  }
  const labelYs = ruleLabelYs(rules, Y, H - M.b - 4);
  rules.forEach((rule, i) => {
    if (!Number.isFinite(rule.y)) return;
    svg.append(
      s('line', {
        class: `hline${rule.cls ? ` ${rule.cls}` : ''}`,
        id: rule.id || null,
        style: {stroke: rule.color || MARKS[RULE_MARKS[rule.cls]] || null},
        x1: M.l,
        x2: W - M.r,
        y1: Y(rule.y),
        y2: Y(rule.y),
      }),
    );
    if (rule.label)
      svg.append(s('text', {class: 'hline-label', x: W - M.r - 4, y: labelYs[i], 'text-anchor': 'end'}, rule.label));
  });
  const markerLine = s('line', {
    class: 'marker',
    x1: 0,
    x2: 0,
    y1: M.t,
    y2: H - M.b,
    visibility: 'hidden',
    style: {stroke: MARKS.marker},
  });
  const setMarker = (x) => {
    const ok = x !== undefined && x !== null && Number.isFinite(x);
    markerLine.setAttribute('visibility', ok ? 'visible' : 'hidden');
    if (ok) markerLine.style.transform = `translateX(${X(x)}px)`;
  };
  setMarker(marker);
  for (const sr of series) {
    svg.append(
      s('path', {
        class: `series${sr.dashed ? ' dashed' : ''}`,
        'data-name': sr.name || null,
        d: pathOf(sr.xs, sr.ys, X, Y),
        stroke: sr.color || seriesColor(0),
        'stroke-width': sr.width || 1.8,
      }),
    );
    if (sr.xs.length <= 60) {
      for (let i = 0; i < sr.xs.length; i++) {
        if (Number.isFinite(sr.ys[i]))
          svg.append(
            s('circle', {class: 'dot', cx: X(sr.xs[i]), cy: Y(sr.ys[i]), r: 2.4, fill: sr.color || seriesColor(0)}),
          );
      }
    }
  }
  const guide = s('line', {class: 'guide', x1: 0, x2: 0, y1: M.t, y2: H - M.b, visibility: 'hidden'});
  const overlay = s('rect', {class: 'overlay', x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b});
  // the marker is drawn last: it is a layer of its own (style.css), and anything drawn over it would need one too
  svg.append(guide, overlay, markerLine);
  const base = series[0];
  const locate = (e) => {
    const r = svg.getBoundingClientRect();
    const px = ((e.clientX - r.left) / r.width) * W;
    const xv = x0 + ((px - M.l) / (W - M.l - M.r)) * (x1 - x0);
    return base?.xs.length ? base.xs[nearestIndex(base.xs, xv)] : null;
  };
  overlay.addEventListener('mousemove', (e) => {
    const xv = locate(e);
    if (xv === null) return;
    guide.setAttribute('x1', X(xv));
    guide.setAttribute('x2', X(xv));
    guide.setAttribute('visibility', 'visible');
    const lines = [`${xLabel} ${xFormat(xv)}`];
    for (const sr of series) {
      const i = nearestIndex(sr.xs, xv);
      if (sr.xs[i] === xv) lines.push([sr.name, fmt(sr.ys[i], 4)]);
    }
    showTooltip(e, lines);
  });
  overlay.addEventListener('mouseleave', () => {
    guide.setAttribute('visibility', 'hidden');
    hideTooltip();
  });
  if (onPick) {
    overlay.classList.add('pickable');
    overlay.addEventListener('click', (e) => {
      const xv = locate(e);
      if (xv !== null) onPick(xv);
    });
  }
  if (!legend) return Object.assign(svg, {setMarker});
  const leg = h(
    'div',
    {class: 'chart-legend'},
    ...series.map((sr) =>
      h('span', {class: 'item'}, h('span', {class: 'swatch line', style: {background: sr.color}}), sr.name),
    ),
    ...bands
      .filter((b) => b.name)
      .map((b) =>
        h('span', {class: 'item'}, h('span', {class: 'swatch', style: {background: b.color, opacity: 0.5}}), b.name),
      ),
  );
  return Object.assign(h('div', {class: 'chart-wrap'}, svg, leg), {setMarker});
}

/**
 * Vertical bars with interval whiskers around a zero line. items: [{label, value, lo, hi, color, flag, tooltip}]
 */
export function barChart({
  items,
  width = 420,
  height = 240,
  yLabel = '',
  xLabel = 'layer',
  yFormat = (v) => fmt(v, 2),
  id,
}) {
  const W = width;
  const H = height;
  const [a, b] = extent([items.map((d) => d.value), items.map((d) => d.lo), items.map((d) => d.hi)], [0]);
  const pad = (b - a) * 0.12;
  const y0 = a - pad;
  const y1 = b + pad;
  const n = items.length;
  const band = (W - M.l - M.r) / Math.max(1, n);
  const Y = (v) => H - M.b - ((v - y0) / (y1 - y0 || 1)) * (H - M.t - M.b);
  const svg = s('svg', {class: 'chart bar-chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: id || null});
  const g = s('g', {class: 'axes'});
  for (const t of niceTicks(y0, y1, 4)) {
    g.append(s('line', {class: 'grid', x1: M.l, x2: W - M.r, y1: Y(t), y2: Y(t)}));
    g.append(s('text', {class: 'tick-label', x: M.l - 6, y: Y(t) + 4, 'text-anchor': 'end'}, yFormat(t)));
  }
  if (yLabel)
    g.append(
      s(
        'text',
        {class: 'axis-label', transform: `translate(12 ${(M.t + H - M.b) / 2}) rotate(-90)`, 'text-anchor': 'middle'},
        yLabel,
      ),
    );
  if (xLabel)
    g.append(s('text', {class: 'axis-label', x: (M.l + W - M.r) / 2, y: H - 4, 'text-anchor': 'middle'}, xLabel));
  svg.append(g);
  items.forEach((d, i) => {
    const cx = M.l + band * (i + 0.5);
    const bw = Math.min(34, band * 0.62);
    const top = Y(Math.max(0, d.value));
    const bottom = Y(Math.min(0, d.value));
    const grp = s('g', {
      class: `bar${d.flag ? ' significant' : ''}`,
      dataset: {index: String(i), value: String(d.value)},
    });
    if (Number.isFinite(d.value))
      grp.append(
        s('rect', {
          x: cx - bw / 2,
          y: top,
          width: bw,
          height: Math.max(1, bottom - top),
          fill: d.color || seriesColor(0),
          rx: 2,
        }),
      );
    if (Number.isFinite(d.lo) && Number.isFinite(d.hi)) {
      const whisker = (x1, x2, y1, y2) => s('line', {class: 'whisker', x1, x2, y1, y2, style: {stroke: MARKS.whisker}});
      grp.append(whisker(cx, cx, Y(d.lo), Y(d.hi)));
      grp.append(whisker(cx - 5, cx + 5, Y(d.lo), Y(d.lo)));
      grp.append(whisker(cx - 5, cx + 5, Y(d.hi), Y(d.hi)));
    }
    if (d.flag)
      grp.append(s('text', {class: 'sig-star', x: cx, y: Math.min(Y(d.hi), top) - 5, 'text-anchor': 'middle'}, '*'));
    grp.append(s('text', {class: 'tick-label', x: cx, y: H - M.b + 16, 'text-anchor': 'middle'}, d.label));
    grp.append(s('rect', {class: 'hit', x: cx - band / 2, y: M.t, width: band, height: H - M.t - M.b}));
    if (d.tooltip) {
      grp.addEventListener('mousemove', (e) => showTooltip(e, d.tooltip));
      grp.addEventListener('mouseleave', hideTooltip);
    }
    svg.append(grp);
  });
  svg.append(s('line', {class: 'zero', x1: M.l, x2: W - M.r, y1: Y(0), y2: Y(0), style: {stroke: MARKS.zero}}));
  return svg;
}

/** Scatter of points [{x, y, color, tooltip, group}] with an HTML legend [{color, label}]. */
// trails: optional [{x0, y0, x1, y1, color}] drawn under the points (e.g. where each head came from).
export function scatter({points, width = 560, height = 440, legendItems = [], id, trails = []}) {
  const W = width;
  const H = height;
  const m = {l: 20, r: 20, t: 20, b: 20};
  const [xa, xb] = extent([points.map((p) => p.x), trails.map((t) => t.x0)]);
  const [ya, yb] = extent([points.map((p) => p.y), trails.map((t) => t.y0)]);
  const span = Math.max(xb - xa, yb - ya) || 1;
  const cx = (xa + xb) / 2;
  const cy = (ya + yb) / 2;
  const scale = Math.min(W - m.l - m.r, H - m.t - m.b) / span;
  const X = (v) => W / 2 + (v - cx) * scale;
  const Y = (v) => H / 2 - (v - cy) * scale;
  const svg = s('svg', {class: 'chart scatter', width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: id || null});
  svg.append(s('rect', {class: 'frame', x: 0.5, y: 0.5, width: W - 1, height: H - 1, rx: 4}));
  for (const t of trails) {
    if (![t.x0, t.y0, t.x1, t.y1].every(Number.isFinite)) continue;
    svg.append(
      s('line', {
        class: 'trail',
        x1: X(t.x0),
        y1: Y(t.y0),
        x2: X(t.x1),
        y2: Y(t.y1),
        stroke: t.color,
        'stroke-width': 1.2,
        'stroke-opacity': 0.55,
      }),
    );
    svg.append(s('circle', {class: 'trail-start', cx: X(t.x0), cy: Y(t.y0), r: 2, fill: t.color, 'fill-opacity': 0.5}));
  }
  for (const p of points) {
    if (!Number.isFinite(p.x) || !Number.isFinite(p.y)) continue;
    const c = s('circle', {class: 'pt', cx: X(p.x), cy: Y(p.y), r: 5.5, fill: p.color, dataset: p.data || {}});
    c.addEventListener('mousemove', (e) => showTooltip(e, p.tooltip));
    c.addEventListener('mouseleave', hideTooltip);
    svg.append(c);
  }
  const leg = h(
    'div',
    {class: 'chart-legend'},
    ...legendItems.map((it) =>
      h('span', {class: 'item'}, h('span', {class: 'swatch dot', style: {background: it.color}}), it.label),
    ),
  );
  return h('div', {class: 'chart-wrap'}, svg, leg);
}

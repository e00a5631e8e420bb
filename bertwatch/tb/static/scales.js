// Colour scales and legends. One sequential scale (YlGnBu) for masses, entropies and attention; one
// diverging scale (blue below the neutral value, red above) for drift, deltas and differences.

import {isProportion} from './api.js';
import {fmt, h} from './dom.js';

const YLGNBU = ['#ffffd9', '#edf8b1', '#c7e9b4', '#7fcdbb', '#41b6c4', '#1d91c0', '#225ea8', '#253494', '#081d58'];
const RDBU_R = [
  '#053061',
  '#2166ac',
  '#4393c3',
  '#92c5de',
  '#d1e5f0',
  '#f7f7f7',
  '#fddbc7',
  '#f4a582',
  '#d6604d',
  '#b2182b',
  '#67001f',
];
const LAYERS = [
  '#4a148c',
  '#283593',
  '#1565c0',
  '#00838f',
  '#2e7d32',
  '#7cb342',
  '#f9a825',
  '#ef6c00',
  '#d84315',
  '#ad1457',
];

export const NAN_COLOR = '#d4d4d4';

function hexToRgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

const RAMPS = {sequential: YLGNBU.map(hexToRgb), diverging: RDBU_R.map(hexToRgb), layers: LAYERS.map(hexToRgb)};

function ramp(stops, t) {
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  const x = t * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  const a = stops[i];
  const b = stops[i + 1];
  return [0, 1, 2].map((k) => Math.round(a[k] + (b[k] - a[k]) * f));
}

const css = (rgb) => `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;

/** Black or white text on an RGB background. */
export function textOn(rgb) {
  if (!rgb) return '#1f1f1f';
  const lum = (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255;
  return lum > 0.55 ? '#1f1f1f' : '#ffffff';
}

/** Sequential scale over [lo, hi]. */
export function sequential(lo, hi) {
  if (!(hi > lo)) hi = lo + 1;
  const stops = RAMPS.sequential;
  const rgb = (v) => (Number.isNaN(v) ? null : ramp(stops, (v - lo) / (hi - lo)));
  return {
    kind: 'sequential',
    domain: [lo, hi],
    ticks: [lo, (lo + hi) / 2, hi],
    rgb,
    color: (v) => (Number.isNaN(v) ? NAN_COLOR : css(rgb(v))),
  };
}

/**
 * Diverging scale: `mid` is neutral (white), mid ± half is full blue / red (red above mid, or below it
 * with `invert`). `side` ('low' | 'high') limits the legend to the half a statistic can reach.
 */
export function diverging(mid, half, {invert = false, side = null} = {}) {
  if (!(half > 0) || !Number.isFinite(half)) half = 1;
  const stops = RAMPS.diverging;
  const rgb = (v) => (Number.isNaN(v) ? null : ramp(stops, 0.5 + ((invert ? -1 : 1) * (v - mid)) / (2 * half)));
  const domain = side === 'low' ? [mid - half, mid] : side === 'high' ? [mid, mid + half] : [mid - half, mid + half];
  return {
    kind: 'diverging',
    domain,
    mid,
    ticks: [domain[0], (domain[0] + domain[1]) / 2, domain[1]],
    rgb,
    color: (v) => (Number.isNaN(v) ? NAN_COLOR : css(rgb(v))),
  };
}

/** Colour of layer `l` of `n` (ordinal: early layers purple/blue, late layers orange/red). */
export function layerColor(l, n) {
  return css(ramp(RAMPS.layers, n <= 1 ? 0 : l / (n - 1)));
}

function finite(values) {
  return values.flat(Infinity).filter(Number.isFinite);
}

/** Largest |v - mid| over finite values (at least `floor`). */
export function halfWidth(values, mid = 0, floor = 1e-6) {
  let m = 0;
  for (const v of finite(values)) m = Math.max(m, Math.abs(v - mid));
  return Math.max(m, floor);
}

/**
 * The scale for a statistic, stable across steps: `range` is {min, max} over every logged step of the
 * series (from /steps). Masses use [0, 1]; drift is diverging around "unchanged" (cosine 1, JS 0).
 */
export function scaleForStat(stat, range, fallbackValues = []) {
  let lo = range && Number.isFinite(range.min) ? range.min : NaN;
  let hi = range && Number.isFinite(range.max) ? range.max : NaN;
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) {
    const f = finite(fallbackValues);
    lo = f.length ? Math.min(...f) : 0;
    hi = f.length ? Math.max(...f) : 1;
  }
  if (stat === 'drift_cosine')
    return Object.assign(diverging(1, Math.max(1 - lo, 1e-3), {invert: true, side: 'low'}), {
      captions: ['more drift', '', 'unchanged'],
    });
  if (stat === 'drift_js')
    return Object.assign(diverging(0, Math.max(hi, 1e-3), {side: 'high'}), {captions: ['unchanged', '', 'more drift']});
  if (isProportion(stat) && lo >= 0 && hi <= 1) return sequential(0, 1);
  return sequential(Math.min(0, lo), hi > Math.min(0, lo) ? hi : Math.min(0, lo) + 1);
}

/** A horizontal legend: gradient bar, ticks, optional captions and a NaN swatch. */
export function legend(scale, {title = '', width = 220, nan = false, format = (v) => fmt(v, 3), captions} = {}) {
  const [lo, hi] = scale.domain;
  const n = 16;
  const stops = Array.from(
    {length: n + 1},
    (_, i) => `${css(scale.rgb(lo + ((hi - lo) * i) / n))} ${(100 * i) / n}%`,
  ).join(', ');
  const bar = h('div', {
    class: 'legend-bar',
    style: {width: `${width}px`, background: `linear-gradient(to right, ${stops})`},
  });
  const ticks = h('div', {class: 'legend-ticks', style: {width: `${width}px`}});
  scale.ticks.forEach((t, i) => {
    const pos = ((t - lo) / (hi - lo)) * 100;
    const cls = i === 0 ? 'tick first' : i === scale.ticks.length - 1 ? 'tick last' : 'tick';
    ticks.append(h('span', {class: cls, style: {left: `${pos}%`}}, format(t)));
  });
  const caps = captions || scale.captions;
  const capRow = caps
    ? h('div', {class: 'legend-captions', style: {width: `${width}px`}}, ...caps.map((c) => h('span', {}, c)))
    : null;
  return h(
    'div',
    {class: `legend legend-${scale.kind}`},
    title ? h('div', {class: 'legend-title'}, title) : null,
    h(
      'div',
      {class: 'legend-main'},
      h('div', {}, bar, ticks, capRow),
      nan ? h('div', {class: 'legend-nan'}, h('span', {class: 'swatch nan'}), 'NaN') : null,
    ),
  );
}

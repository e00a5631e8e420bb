// Colour scales and legends. Every colour comes from colours.json, the one home Python reads too
// (bertwatch/tb/colours.py: the report and its figures): one sequential scale (YlGnBu) for masses, entropies and
// attention; one diverging scale for drift, deltas and differences whose red end is worse, more drift or up, its
// blue end better, less drift or down (white: no change); one ordinal colour per layer; the series colours of lines
// that are not layers; each pruning order's colour; the marks drawn across charts; the grey of a missing value.

import {isProportion} from './api.js';
import COLOURS from './colours.json' with {type: 'json'};
import {fmt, h} from './dom.js';

export const NAN_COLOR = COLOURS.nan;
/** Each pruning order's colour (importance, iterative, random, randomMean) and its band's opacity (bandOpacity). */
export const PRUNING = COLOURS.pruning;
/** The marks drawn across charts: zero, delta (±δ), alert (an alert's multiple), reference, marker (the step marker,
 * the pruning answer), gap, whisker. */
export const MARKS = COLOURS.marks;

function hexToRgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

const RAMPS = {
  sequential: COLOURS.sequential.map(hexToRgb),
  diverging: COLOURS.diverging.stops.map(hexToRgb),
  layers: COLOURS.layers.map(hexToRgb),
};

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
  const text = COLOURS.text;
  if (!rgb) return text.onLight;
  const lum = (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255;
  return lum > text.lightAbove ? text.onLight : text.onDark;
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
 * with `invert`: for a quantity whose higher values are better, e.g. Δ accuracy, red stays "worse").
 * `side` ('low' | 'high') limits the legend to the half a statistic can reach.
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

/** Whether higher values of a diverging statistic are the better / less-drift side (drawn blue). */
export function higherIsBetter(stat) {
  return COLOURS.diverging.higherIsBetter.includes(stat);
}

/** The scale of a change of a metric: red = worse, whichever way the metric points (`greaterIsBetter`). */
export function changeScale(half, greaterIsBetter = true) {
  return diverging(0, half, {invert: greaterIsBetter !== false});
}

/** Colour of layer `l` of `n` (ordinal: early layers purple/blue, late layers orange/red), in every chart. */
export function layerColor(l, n) {
  return css(ramp(RAMPS.layers, n <= 1 ? 0 : l / (n - 1)));
}

/** Colour of the k-th line of a chart whose lines are not layers (measures, classes, heads), in order. */
export function seriesColor(k) {
  return COLOURS.series[k % COLOURS.series.length];
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
    return Object.assign(diverging(1, Math.max(1 - lo, 1e-3), {invert: higherIsBetter(stat), side: 'low'}), {
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
      nan
        ? h('div', {class: 'legend-nan'}, h('span', {class: 'swatch nan', style: {backgroundColor: NAN_COLOR}}), 'NaN')
        : null,
    ),
  );
}

// Activation outliers per layer (a self-contained card of the Heads view): each layer's largest activation over the
// run as a multiple of its first (pretrained) value, with the outlier alert's multiple drawn, and at the view's step
// a table of each layer's outlier statistics beside its mean [SEP] and punctuation mass: a layer whose heads park
// their attention on delimiters (a "no-op") and the outlier it feeds are read together (Bondarenko et al. 2023).
// Which statistics and which multiple come from the backend (/outliers, bertwatch/tb/views/heads/layer_outliers.py).

import {nums, rawText} from './api.js';
import {chartWidth, lineChart} from './charts.js';
import {clear, fmt, fmtStep, h} from './dom.js';
import {layerColor} from './scales.js';
import {StepCard} from './step_card.js';

export class OutlierPanel extends StepCard {
  constructor() {
    super('Activation outliers', 'outlier-card', 'outliers');
  }

  pick(data) {
    return data;
  }

  render(data) {
    const c = this.card;
    c.sub.textContent =
      `each layer's ${data.stat} over its value at step ${fmtStep(data.referenceStep)}; ` +
      `the outlier alert fires above ×${fmt(data.multiple, 3)} (Bondarenko et al. 2023)`;
    clear(c.aside).append(
      h('span', {class: 'pill', id: 'outlier-step', dataset: {step: String(data.step)}}, `step ${fmtStep(data.step)}`),
    );
    const body = clear(c.body);
    const ratios = data.ratios.map(nums);
    const chart = lineChart({
      width: chartWidth(body),
      height: 220,
      id: 'outlier-chart',
      series: ratios.map((ys, l) => ({
        name: `L${l}`,
        color: layerColor(l, ratios.length), // a layer's colour in every chart
        xs: data.steps,
        ys,
        width: 1.6,
      })),
      yLabel: `${data.stat} / step ${fmtStep(data.referenceStep)}`,
      yFormat: (v) => `×${fmt(v, 3)}`,
      hlines: [
        {y: 1, label: '', cls: 'hline-soft'},
        {y: data.multiple, label: `alert ×${fmt(data.multiple, 3)}`, cls: 'hline-alert', id: 'outlier-multiple'},
      ],
      marker: data.step,
      legend: true,
    });
    body.append(chart, outlierTable(data));
  }
}

/** A table cell's text: the shares as percentages, the top dimensions kept as "2 of 3", a value that cannot be
 * (no outlier at all: no share on delimiters) as a dash. */
function columnText(stat, v) {
  if (!Number.isFinite(v)) return '—';
  if (stat === 'delimiter_share') return `${fmt(100 * v, 3)}%`;
  if (stat === 'outlier_dim_overlap') return `${Math.round(3 * v)} of 3`;
  return fmt(v, 3);
}

/** One row per layer at the view's step: the rule's quantity and its ratio, then each other column (the masses are
 * means over the layer's heads); a ratio past the multiple is marked. */
function outlierTable(data) {
  const at = data.steps.indexOf(data.step);
  const cell = (raw, text, cls, stat) => h('td', {class: cls, dataset: {value: rawText(raw), stat}}, text);
  const rows = data.columns[0].values.map((_, l) => {
    const ratio = nums(data.ratios[l])[at];
    const over = Number.isFinite(ratio) && ratio > data.multiple;
    return h(
      'tr',
      {dataset: {layer: String(l)}, class: over ? 'outlier-over' : ''},
      h('td', {}, `L${l}`),
      cell(data.columns[0].values[l], fmt(nums(data.columns[0].values[l]), 4), 'num', data.stat),
      cell(data.ratios[l][at], Number.isFinite(ratio) ? `×${fmt(ratio, 3)}` : '—', 'num ratio', 'ratio'),
      ...data.columns
        .slice(1)
        .map((col) => cell(col.values[l], columnText(col.stat, nums(col.values[l])), 'num', col.stat)),
    );
  });
  const title = (col) => `${col.stat}: ${col.description}`;
  return h(
    'table',
    {class: 'rank-table outlier-table'},
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', {}, 'layer'),
        h('th', {title: title(data.columns[0])}, data.columns[0].label),
        h('th', {title: `${data.stat} over its value at step ${data.referenceStep}`}, 'ratio'),
        ...data.columns.slice(1).map((col) => h('th', {title: title(col)}, col.label)),
      ),
    ),
    h('tbody', {}, ...rows),
  );
}

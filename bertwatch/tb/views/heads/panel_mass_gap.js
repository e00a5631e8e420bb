// The weight-versus-contribution gap (a self-contained card of the Heads view): per layer, the [CLS] and [SEP]
// mass by attention weight next to the same mass by norm (Kobayashi et al. 2020) and by ALTI contribution
// (Ferrando et al. 2022), each the mean over the layer's heads, and the gap weights − contribution. A high weight
// with a low contribution is Clark et al.'s "no-op" reading of [SEP] attention. Which statistics pair up comes
// from the backend (/mass_gap, whose home is bertwatch/core/stat_names.py); this file names none.

import {nums, rawText} from './api.js';
import {chartWidth, lineChart} from './charts.js';
import {clear, fmt, fmtSigned, fmtStep, h} from './dom.js';
import {seriesColor} from './scales.js';
import {StepCard} from './step_card.js';

export class MassGapPanel extends StepCard {
  constructor() {
    super('Weight vs contribution', 'mass-gap-card', 'mass_gap');
  }

  /** The targets with two measures or more; null when none has (no gap to show). */
  pick(data) {
    const targets = data.targets.filter((t) => t.measures.length > 1);
    return targets.length ? targets : null;
  }

  render(targets) {
    const c = this.card;
    const steps = [...new Set(targets.flatMap((t) => t.measures.map((m) => m.step)))];
    c.sub.textContent =
      'per layer, mean over heads: a high weight with a low contribution moves little (Kobayashi et al. 2020)';
    clear(c.aside).append(
      h(
        'span',
        {
          class: steps.length > 1 ? 'pill pill-warn' : 'pill',
          id: 'mass-gap-step',
          dataset: {step: String(Math.max(...steps))},
          title:
            steps.length > 1
              ? 'The measures were last logged at different steps; each shows its own step at or before this one.'
              : '',
        },
        steps.length > 1 ? `steps ${steps.map(fmtStep).join(', ')}` : `step ${fmtStep(steps[0])}`,
      ),
    );
    const body = clear(c.body);
    for (const target of targets) {
      const layers = target.measures[0].layerMeans.length;
      const xs = Array.from({length: layers}, (_, l) => l);
      const chart = lineChart({
        width: chartWidth(body),
        height: 200,
        id: `mass-gap-chart-${targets.indexOf(target)}`,
        series: target.measures.map((m, k) => ({
          name: m.label,
          color: seriesColor(k), // the report's figure draws each measure in the same colour
          xs,
          ys: nums(m.layerMeans),
          width: 1.8,
        })),
        xLabel: 'layer',
        xFormat: (v) => `L${v}`,
        yLabel: `mass on ${target.target}`,
        legend: true,
      });
      body.append(h('div', {class: 'legend-title'}, `Mass on ${target.target}`), chart, gapTable(target));
    }
  }
}

/** One row per layer: each measure's mass, then weights − each other measure (cells carry data-value, data-stat). */
function gapTable(target) {
  const gaps = Object.entries(target.gaps);
  const labelOf = Object.fromEntries(target.measures.map((m) => [m.stat, m.label]));
  const cell = (raw, text, cls, stat) => h('td', {class: cls, dataset: {value: rawText(raw), stat}}, text);
  const rows = target.measures[0].layerMeans.map((_, l) =>
    h(
      'tr',
      {dataset: {layer: String(l)}},
      h('td', {}, `L${l}`),
      ...target.measures.map((m) => cell(m.layerMeans[l], fmt(nums(m.layerMeans[l]), 3), 'mass', m.stat)),
      ...gaps.map(([stat, values]) => cell(values[l], fmtSigned(nums(values[l]), 3), 'gap', stat)),
    ),
  );
  return h(
    'table',
    {class: 'rank-table mass-gap-table', dataset: {target: target.target}},
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', {}, 'layer'),
        ...target.measures.map((m) => h('th', {title: `${m.stat}: ${m.description}`}, m.label)),
        ...gaps.map(([stat]) => h('th', {title: `${target.measures[0].stat} − ${stat}`}, `weights − ${labelOf[stat]}`)),
      ),
    ),
    h('tbody', {}, ...rows),
  );
}

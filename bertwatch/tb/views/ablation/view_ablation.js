// Ablation: the change of the task metric when each head / layer is disabled, with paired-bootstrap
// intervals. A dot marks the cells whose Benjamini-Hochberg q-value (corrected over all heads, or all layers)
// is below 0.05, or, as an option, those whose uncorrected 95% interval excludes 0; the view says which.
// Plus the pruning curves if logged: Δ of the importance order with its interval, beside the iterative order and
// the random orders (mean and range). The answers in words ("how many heads can go", what the examples resolve)
// come from the route as Python writes them (bertwatch/core/removable.py, resolution.py); red is "worse" in every
// colour of the view, whichever way the metric points (scales.js, colours.json).

import {getJSON, nums, rawText, tagsOfKind} from './api.js';
import {barChart, chartWidth, lineChart} from './charts.js';
import {card, clear, emptyState, field, fmt, fmtSigned, h, headName, setOptions} from './dom.js';
import {heatmap} from './heatmap.js';
import {changeScale, halfWidth, legend, PRUNING} from './scales.js';

const F = {value: 0, delta: 1, lo: 2, hi: 3, p: 4};

const excludesZero = (lo, hi) => (Number.isFinite(lo) && Number.isFinite(hi) ? lo > 0 || hi < 0 : false);
const FDR = 0.05;
const MARKS = {
  q: {
    text: `BH q < ${FDR} (corrected)`,
    tile: `Heads with BH q < ${FDR}`,
    note: `Benjamini–Hochberg q < ${FDR} over all cells (FDR ${FDR})`,
  },
  ci: {
    text: '95% interval excludes 0 (uncorrected)',
    tile: 'Heads with interval excluding 0',
    note: '95% interval excludes 0 (uncorrected)',
  },
};

function stat(label, value, id, title) {
  return h(
    'div',
    {class: 'stat-tile', id: id || null, title: title || null},
    h('div', {class: 'stat-label'}, label),
    h('div', {class: 'stat-value'}, value),
  );
}

// What was measured, from the route: the task type and each metric's name, definition and baseline value
// (tables written before these were recorded have only the compared metric's key).
function aboutLines(data) {
  const metrics = Array.isArray(data.metrics) ? data.metrics : [];
  const compared = metrics[0];
  const lines = [
    h('div', {class: 'about-line', id: 'ablation-description'}, data.description || data.metric || 'metric'),
  ];
  if (compared?.description) lines.push(h('div', {class: 'about-note'}, `${compared.label}: ${compared.description}`));
  const others = metrics
    .slice(1)
    .map((m) => `${m.label} ${m.baseline === null || m.baseline === undefined ? '—' : fmt(Number(m.baseline), 4)}`);
  if (others.length)
    lines.push(
      h('div', {class: 'about-note', id: 'ablation-other-metrics'}, `Also at baseline: ${others.join(' · ')}`),
    );
  return lines;
}

// The verdict against the constant answer and the predicted class shares, as Python wrote them.
function trivialLines(trivial) {
  const css = trivial.noBetter ? 'ablation-constant no-better' : 'ablation-constant';
  return h(
    'div',
    {class: css, id: 'ablation-trivial'},
    ...trivial.lines.map((line, i) => h('div', {class: i === 0 ? 'constant-verdict' : 'about-note'}, line)),
  );
}

// Δ against the unpruned model per step: series, bands and rules for lineChart from the curves table, each order in
// its colour of colours.json (the report's pruning figure reads the same).
function curveChart(curves, metric, width) {
  const cols = Object.fromEntries(curves.columns.map((c, i) => [c, i]));
  const rows = nums(curves.rows);
  const col = (name) => rows.map((r) => r[cols[name]]);
  const xs = col('fraction').map((f) => f * 100);
  const has = (name) => col(name).slice(1).some(Number.isFinite);
  const series = [];
  const bands = [];
  if (has('random_mean')) {
    bands.push({
      id: 'pruning-random-band',
      name: `random orders (${curves.randomOrders}): range`,
      color: PRUNING.random,
      opacity: PRUNING.bandOpacity.random,
      xs,
      lo: col('random_min'),
      hi: col('random_max'),
    });
    series.push({name: 'random orders: mean', color: PRUNING.randomMean, dashed: true, xs, ys: col('random_mean')});
  }
  if (has('iterative')) {
    bands.push({
      id: 'pruning-iterative-band',
      color: PRUNING.iterative,
      opacity: PRUNING.bandOpacity.iterative,
      xs,
      lo: col('iterative_low'),
      hi: col('iterative_high'),
    });
    series.push({name: 'iterative importance', color: PRUNING.iterative, xs, ys: col('iterative')});
  }
  bands.push({
    id: 'pruning-importance-band',
    name: '95% interval',
    color: PRUNING.importance,
    opacity: PRUNING.bandOpacity.importance,
    xs,
    lo: col('importance_low'),
    hi: col('importance_high'),
  });
  series.push({name: 'importance (one-shot)', color: PRUNING.importance, xs, ys: col('importance')});
  const r = curves.removable || {};
  const greater = r.greater_is_better !== false;
  const delta = Number(curves.delta);
  const answer = r.importance && r.importance.step >= 0 ? r.importance.fraction * 100 : null;
  return lineChart({
    width,
    id: 'pruning-chart',
    series: series.reverse(),
    bands,
    xLabel: 'heads pruned (%)',
    xFormat: (v) => `${fmt(v, 3)}%`,
    yLabel: `Δ ${metric}`,
    yFormat: (v) => fmtSigned(v, 2),
    hlines: [
      {y: 0, cls: 'zero'},
      {
        y: greater ? -delta : delta,
        cls: 'delta',
        id: 'pruning-delta-line',
        label: `${greater ? '−' : '+'}δ = ${fmt(delta, 4)}`,
      },
    ],
    marker: answer,
    legend: true,
  });
}

export class AblationView {
  constructor(app) {
    this.app = app;
    this.id = 'ablation';
    this.label = 'Ablation';
    this.modeSelect = h('select', {id: 'ablation-mode', class: 'select', 'aria-label': 'Mode'});
    this.modeSelect.addEventListener('change', () => this.load());
    this.marksSelect = h('select', {id: 'ablation-marks', class: 'select', 'aria-label': 'Marks'});
    setOptions(
      this.marksSelect,
      Object.entries(MARKS).map(([value, m]) => ({value, text: m.text})),
      'q',
    );
    this.marksSelect.addEventListener('change', () => this.load());
    this.toolbar = h(
      'div',
      {class: 'toolbar'},
      field('Mode', this.modeSelect),
      field('Marks', this.marksSelect),
      h(
        'span',
        {class: 'toolbar-note'},
        'uniform: attention spread evenly over the keys (Kovaleva) · zero: head output removed (Michel)',
      ),
    );
    this.about = h('div', {class: 'ablation-about', id: 'ablation-about'});
    this.summary = h('div', {class: 'stat-tiles'});
    this.headsCard = card('Heads', {class: 'grid-card'});
    this.layersCard = card('Layers', {class: 'chart-card'});
    this.pruneCard = card('Pruning curve', {class: 'chart-card'});
    this.content = h(
      'div',
      {},
      this.about,
      this.summary,
      h(
        'div',
        {class: 'layout-heads'},
        this.headsCard.el,
        h('div', {class: 'stack'}, this.layersCard.el, this.pruneCard.el),
      ),
    );
    this.emptyEl = h('div', {});
    this.el = h('div', {class: 'view view-ablation', id: 'view-ablation'}, this.toolbar, this.emptyEl, this.content);
    this.seq = 0;
  }

  modes(tags, run) {
    return [...new Set(tagsOfKind(tags, run, 'ablation_heads').map((t) => t.mode))].sort();
  }

  hasData(tags, run) {
    return this.modes(tags, run).length > 0;
  }

  hide() {}

  async update() {
    const modes = this.modes(this.app.tags, this.app.run);
    clear(this.emptyEl);
    this.content.hidden = this.toolbar.hidden = modes.length === 0;
    if (!modes.length) {
      this.emptyEl.append(
        emptyState(
          'No ablation results in this run.',
          'Run `bertwatch ablate` or add the AblationCallback; results land in bertwatch/ablation/<mode>/.',
        ),
      );
      return;
    }
    setOptions(this.modeSelect, modes);
    await this.load();
  }

  async load() {
    const run = this.app.run;
    const seq = ++this.seq;
    const data = await getJSON('ablation', {run, mode: this.modeSelect.value});
    if (seq !== this.seq) return;
    const metrics = Array.isArray(data.metrics) ? data.metrics : [];
    const metric = metrics[0]?.label || data.metric || 'metric';
    const baseline = Number(data.baseline);
    const heads = nums(data.heads);
    const layers = nums(data.layers);
    const L = heads.length;
    const deltas = heads.map((row) => row.map((c) => c[F.delta]));
    const marks = this.marksSelect.value in MARKS ? this.marksSelect.value : 'q';
    const headsQ = data.headsQ ? nums(data.headsQ) : null;
    const layersQ = data.layersQ ? nums(data.layersQ) : null;
    const marked = (c, q) => (marks === 'q' ? Number.isFinite(q) && q < FDR : excludesZero(c[F.lo], c[F.hi]));
    const flags = heads.map((row, l) => row.map((c, k) => marked(c, headsQ ? headsQ[l][k] : NaN)));
    const nSig = flags.flat().filter(Boolean).length;
    const greater = data.greaterIsBetter !== false;
    const scale = changeScale(halfWidth(deltas, 0, 1e-6), greater);
    const layerDeltas = layers.map((r) => r[F.delta]);
    const layerScale = changeScale(halfWidth(layerDeltas, 0, 1e-6), greater);

    // best / worst single-head removal, in the metric's direction (a loss is better lower)
    const gain = (d) => (greater ? d : -d);
    let best = null;
    let worst = null;
    deltas.forEach((row, l) => {
      row.forEach((d, k) => {
        if (!Number.isFinite(d)) return;
        if (!best || gain(d) > gain(best.d)) best = {d, l, k};
        if (!worst || gain(d) < gain(worst.d)) worst = {d, l, k};
      });
    });
    clear(this.about);
    // The full model against the constant answer (bertwatch/core/baseline.py): said first when it is no better.
    const trivial = data.trivial || null;
    if (trivial?.noBetter) this.about.append(trivialLines(trivial));
    this.about.append(...aboutLines(data));
    const said = data.headline || data.resolution;
    if (said) this.about.append(h('div', {class: 'ablation-headline', id: 'ablation-headline'}, said));
    if (trivial && !trivial.noBetter) this.about.append(trivialLines(trivial));
    const constantValue = trivial && Number.isFinite(Number(trivial.value)) ? Number(trivial.value) : null;
    clear(this.summary).append(
      stat('Metric', metric, 'ablation-metric', metrics[0] ? metrics[0].description : null),
      stat('Baseline', fmt(baseline, 4), 'ablation-baseline'),
      stat(
        trivial ? `Always '${trivial.constantName}'` : 'Constant answer',
        constantValue === null ? (trivial ? 'undefined' : '—') : fmt(constantValue, 4),
        'ablation-constant',
        trivial ? trivial.lines[0] : 'not recorded in this log',
      ),
      stat(
        'Evaluation examples',
        data.numExamples !== null && data.numExamples !== undefined ? String(data.numExamples) : '—',
        'ablation-examples',
        data.resolution,
      ),
      stat(MARKS[marks].tile, `${nSig} of ${L * (heads[0] || []).length}`, 'ablation-marked'),
      stat('Best single-head removal', best ? `${headName(best.l, best.k)}  ${fmtSigned(best.d, 3)}` : '—'),
      stat(
        'Most harmful removal',
        worst ? `${headName(worst.l, worst.k)}  ${fmtSigned(worst.d, 3)}` : '—',
        'ablation-worst',
        worst ? `${headName(worst.l, worst.k)}: most harmful single-head removal` : null,
      ),
    );

    const rawDeltas = data.heads.map((row) => row.map((c) => rawText(c[F.delta])));
    const hm = heatmap({
      id: 'ablation-heatmap',
      values: deltas,
      raw: rawDeltas,
      scale,
      flags,
      tooltip: (l, k) => {
        const c = heads[l][k];
        return [
          `${headName(l, k)} disabled`,
          [`Δ ${metric}`, fmtSigned(c[F.delta], 4)],
          ['95% interval', `${fmtSigned(c[F.lo], 3)} … ${fmtSigned(c[F.hi], 3)}`],
          [metric, fmt(c[F.value], 4)],
          ['p', fmt(c[F.p], 3)],
          ['BH q', headsQ ? fmt(headsQ[l][k], 3) : '—'],
          ['', flags[l][k] ? `marked: ${MARKS[marks].note}` : 'not marked'],
        ];
      },
    });
    const hc = this.headsCard;
    hc.title.textContent = `Δ ${metric} per head`;
    hc.sub.textContent = `${data.mode} · metric with the head disabled minus the baseline ${fmt(baseline, 4)}`;
    clear(hc.body).append(
      hm.el,
      h(
        'div',
        {class: 'legend-row'},
        legend(scale, {
          title: `Δ ${metric}`,
          format: (v) => fmtSigned(v, 2),
          captions: greater ? ['worse', 'no change', 'better'] : ['better', 'no change', 'worse'],
        }),
        h('div', {class: 'sig-note', id: 'ablation-sig-note'}, h('span', {class: 'sig inline'}), MARKS[marks].note),
      ),
    );

    const lc = this.layersCard;
    lc.title.textContent = `Δ ${metric} per layer`;
    lc.sub.textContent = `whole layer disabled; whiskers: 95% paired-bootstrap interval; * ${MARKS[marks].note}`;
    const items = layers.map((r, l) => ({
      label: `L${l}`,
      value: r[F.delta],
      lo: r[F.lo],
      hi: r[F.hi],
      color: layerScale.color(r[F.delta]),
      flag: marked(r, layersQ ? layersQ[l] : NaN),
      tooltip: [
        `L${l} disabled`,
        [`Δ ${metric}`, fmtSigned(r[F.delta], 4)],
        ['95% interval', `${fmtSigned(r[F.lo], 3)} … ${fmtSigned(r[F.hi], 3)}`],
        [metric, fmt(r[F.value], 4)],
        ['p', fmt(r[F.p], 3)],
        ['BH q', layersQ ? fmt(layersQ[l], 3) : '—'],
      ],
    }));
    clear(lc.body).append(
      barChart({
        width: chartWidth(lc.body, 420),
        id: 'ablation-layers',
        items,
        yLabel: `Δ ${metric}`,
        yFormat: (v) => fmtSigned(v, 2),
      }),
    );

    const pc = this.pruneCard;
    pc.el.hidden = !data.pruning && !data.curves;
    if (data.curves) {
      if (data.removable)
        this.summary.append(stat(data.removable.label, data.removable.value, 'ablation-removable', data.headline));
      pc.title.textContent = 'Pruning: how many heads can go?';
      pc.sub.textContent = `Δ ${metric} against the unpruned model as heads are removed; bands: 95% paired-bootstrap intervals, and the range of the random orders; dotted line: the importance order's answer`;
      clear(pc.body).append(
        h(
          'div',
          {class: 'pruning-answer', id: 'pruning-answer'},
          h('div', {class: 'answer-main'}, data.headline || ''),
          ...(data.answers || []).map((t) => h('div', {class: 'about-note'}, t)),
        ),
        curveChart(data.curves, metric, chartWidth(pc.body)),
      );
    } else if (data.pruning) {
      const curve = nums(data.pruning);
      pc.sub.textContent = 'heads removed in order of importance (Michel et al. 2019)';
      clear(pc.body).append(
        lineChart({
          width: chartWidth(pc.body),
          id: 'pruning-chart',
          series: [
            {name: metric, color: PRUNING.importance, xs: curve.map((p) => p[0] * 100), ys: curve.map((p) => p[1])},
          ],
          xLabel: 'heads pruned (%)',
          xFormat: (v) => `${fmt(v, 3)}%`,
          yLabel: metric,
          hline: {y: baseline, label: `baseline ${fmt(baseline, 4)}`},
          legend: false,
        }),
      );
    }
  }
}

// Heads: one statistic as a [layers x heads] heatmap at a chosen step, Clark's behaviour labels on the
// cells, the clicked head's trajectory over steps, every layer's mean over steps, and (when logged) the
// pattern-class shares and the UD word-class attention shares over steps.

import {AlertStrip} from './alert_strip.js';
import {getJSON, gridTags, isPerLayer, num, nums, oneInFlight, rawText, statGroup, tagsOfKind} from './api.js';
import {chartWidth, lineChart} from './charts.js';
import {card, clear, emptyState, field, fmt, fmtStep, h, headName, setOptions, stepper} from './dom.js';
import {heatmap} from './heatmap.js';
import {MassGapPanel} from './panel_mass_gap.js';
import {OutlierPanel} from './panel_outliers.js';
import {layerColor, legend, scaleForStat, seriesColor} from './scales.js';
import {VerdictStrip} from './verdict_strip.js';

// The label rules (glyphs, thresholds, texts) come from the backend's /labels, their one home.

// How long the step must rest before the panels that follow it fetch: while the slider moves, only the heatmap does.
const SETTLE_MS = 150;

export class HeadsView {
  constructor(app) {
    this.app = app;
    this.id = 'heads';
    this.label = 'Heads';
    this.state = {tag: null, stat: null, steps: [], range: null, selected: null, showLabels: true, showValues: false};
    this.seq = 0;
    this.statSelect = h('select', {id: 'stat-select', class: 'select', 'aria-label': 'Statistic'});
    this.stepper = stepper({onChange: () => this.onStep()});
    const labels = h('input', {type: 'checkbox', id: 'show-labels', checked: true});
    const values = h('input', {type: 'checkbox', id: 'show-values'});
    labels.addEventListener('change', () => {
      this.state.showLabels = labels.checked;
      if (labels.checked) this.loadGrid();
      else this.renderGrid();
    });
    values.addEventListener('change', () => {
      this.state.showValues = values.checked;
      this.renderGrid();
    });
    this.statSelect.addEventListener('change', () => this.update('stat'));
    this.toolbar = h(
      'div',
      {class: 'toolbar'},
      field('Statistic', this.statSelect),
      this.stepper.el,
      h(
        'label',
        {class: 'check', title: "Clark et al.'s behaviour labels from the same step"},
        labels,
        h('span', {}, 'Behaviour labels'),
      ),
      h('label', {class: 'check'}, values, h('span', {}, 'Values')),
    );
    this.gridCard = card('Heads', {class: 'grid-card'});
    this.trajCard = card('Trajectory', {class: 'chart-card'});
    this.meansCard = card('Layer means', {class: 'chart-card'});
    this.patternCard = card('Pattern classes', {class: 'chart-card'});
    this.patternCard.el.id = 'pattern-card';
    this.patternCard.el.hidden = true;
    this.wordClassCard = card('Word classes', {class: 'chart-card'});
    this.wordClassCard.el.id = 'word-class-card';
    this.wordClassCard.el.hidden = true;
    this.massGap = new MassGapPanel();
    this.outliers = new OutlierPanel();
    this.content = h(
      'div',
      {class: 'layout-heads'},
      this.gridCard.el,
      h(
        'div',
        {class: 'stack'},
        this.trajCard.el,
        this.meansCard.el,
        this.massGap.el,
        this.outliers.el,
        this.patternCard.el,
        this.wordClassCard.el,
      ),
    );
    this.emptyEl = h('div', {});
    this.alertStrip = new AlertStrip({onPick: (episode, stat) => this.pickAlert(episode, stat)});
    this.verdictStrip = new VerdictStrip();
    this.el = h(
      'div',
      {class: 'view view-heads', id: 'view-heads'},
      this.toolbar,
      this.verdictStrip.el,
      this.alertStrip.el,
      this.emptyEl,
      this.content,
    );
    this.grid = null;
    this.traj = null;
    this.means = null;
    // While dragging the slider, at most one /grid request is in flight; the latest position wins. The heatmap
    // comes first: its labels are asked for once it is drawn, the panels that follow the step once the step has
    // rested SETTLE_MS (requests to TensorBoard's data server answer slower side by side).
    this.loadGrid = oneInFlight(() => this.fetchGrid());
  }

  hasData(tags, run) {
    return gridTags(tags, run).length > 0;
  }

  hide() {}

  async update(reason) {
    const app = this.app;
    const tags = gridTags(app.tags, app.run);
    clear(this.emptyEl);
    this.content.hidden = tags.length === 0;
    this.toolbar.hidden = tags.length === 0;
    if (!tags.length) {
      this.emptyEl.append(
        emptyState(
          'No head statistics in this run.',
          'They appear as bertwatch/heads/<stat> once the callback logs its first step.',
        ),
      );
      return;
    }
    const preferred =
      (reason === 'stat' && this.statSelect.value) ||
      this.state.stat ||
      (tags.find((t) => t.stat === 'cls_mass') || tags[0]).stat;
    setOptions(
      this.statSelect,
      tags.map((t) => ({value: t.stat, text: t.stat, group: statGroup(t.stat), title: t.description})),
      preferred,
    );
    const info = tags.find((t) => t.stat === this.statSelect.value);
    if (reason === 'data') this.massGap.invalidate();
    if (reason === 'data') this.outliers.invalidate();
    const changedSeries = info.tag !== this.state.tag || reason === 'run';
    if (changedSeries) this.grid = null;
    if (reason === 'run' || app.run !== this.state.run) this.state.selected = null;
    this.state.tag = info.tag;
    this.state.stat = info.stat;
    this.state.info = info;
    this.state.run = app.run;
    await this.loadSteps();
  }

  async loadSteps() {
    const {tag, run} = this.state;
    const seq = ++this.seq;
    const data = await getJSON('steps', {run, tag});
    if (seq !== this.seq) return;
    const oldStep = this.stepper.step;
    const steps = data.steps;
    this.state.steps = steps;
    this.state.range = {min: num(data.min), max: num(data.max)};
    let index = steps.length - 1;
    if (!this.stepper.follow && oldStep !== null) {
      const j = steps.indexOf(oldStep);
      if (j >= 0) index = j;
    }
    this.stepper.set(steps, index);
    await Promise.all([
      this.alertStrip.load(this.app, this.state.run),
      this.verdictStrip.load(this.app, this.state.run),
      this.loadGrid(),
      this.loadTrajectory(),
      this.loadMeans(),
      this.loadPatterns(),
      this.loadWordClasses(),
    ]);
  }

  /** An alert was clicked: select its head, and show its statistic when the run has it. */
  pickAlert(episode, stat) {
    this.state.selected = [episode.layer, episode.head ?? 0];
    if (stat && stat !== this.state.stat && gridTags(this.app.tags, this.state.run).some((t) => t.stat === stat)) {
      this.statSelect.value = stat;
      this.update('stat');
      return;
    }
    this.grid?.select(this.state.selected);
    this.loadTrajectory();
  }

  onStep() {
    this.loadGrid();
    const step = this.stepper.step;
    for (const chart of [this.trajChart, this.meansChart, this.patternChart, this.wordClassChart])
      if (chart) chart.setMarker(step);
  }

  async fetchGrid() {
    const {run, tag, steps} = this.state;
    if (!steps.length) return;
    const step = steps[this.stepper.index];
    this.gridSeq = (this.gridSeq || 0) + 1;
    const seq = this.gridSeq;
    const current = () => seq === this.gridSeq && run === this.state.run && tag === this.state.tag;
    const t0 = performance.now();
    const grid = await getJSON('grid', {run, tag, step});
    if (!current()) return;
    this.gridData = grid;
    if (this.labels && this.labels.step !== step) this.labels = null;
    const firstSelection = !this.state.selected;
    if (firstSelection) this.state.selected = argmax(nums(grid.values));
    this.renderGrid();
    const t1 = performance.now();
    const timings = this.app.timings;
    timings.lastGrid = {step, fetchAndRenderMs: t1 - t0, at: t1};
    if (timings.firstHeatmap === undefined) {
      timings.firstHeatmap = t1;
      performance.mark('bw-heatmap-rendered');
    }
    if (firstSelection) this.loadTrajectory();
    if (this.loadGrid.pending()) return; // the slider moved on: the next grid's labels and panels follow it
    // Labels need six other series: they arrive separately and never hold up the next heatmap.
    const labels = this.state.showLabels ? getJSON('labels', {run, step}).catch(() => null) : Promise.resolve(null);
    labels.then((lab) => {
      if (!current()) return;
      if (lab) {
        this.labels = lab;
        this.labelRules = lab.rules;
        this.renderGrid();
      }
      clearTimeout(this.settleTimer);
      this.settleTimer = setTimeout(() => {
        if (!current()) return;
        this.massGap.follow(run, step);
        this.outliers.follow(run, step);
      }, SETTLE_MS);
    });
  }

  renderGrid() {
    const grid = this.gridData;
    if (!grid) return;
    const {stat, info, showLabels, showValues} = this.state;
    const values = nums(grid.values);
    const raw = grid.values.map((row) => row.map(rawText));
    const scale = scaleForStat(stat, this.state.range, values);
    const perLayer = grid.heads === 1 && isPerLayer(stat);
    // the behaviour labels are the heads': a per-layer statistic's cells are whole layers, so they get none
    const labelGrid = showLabels && !perLayer && this.labels?.labels ? this.labels.labels : null;
    const glyphs = labelGrid ? Object.fromEntries(this.labels.rules.map((r) => [r.label, r.glyph])) : {};
    const marks = labelGrid ? labelGrid.map((row) => row.map((l) => (l ? glyphs[l] : null))) : null;
    const hm = heatmap({
      id: 'heads-heatmap',
      values,
      raw,
      scale,
      marks,
      showValues,
      selected: this.state.selected,
      tooltip: (l, hd, v) => {
        const lines = [
          perLayer ? `L${l} (whole layer)` : headName(l, hd),
          [stat, fmt(v, 4)],
          ['step', fmtStep(grid.step)],
        ];
        if (labelGrid?.[l][hd]) lines.push(['behaviour', labelGrid[l][hd]]);
        return lines;
      },
      onClick: (l, hd) => {
        this.state.selected = [l, hd];
        hm.select([l, hd]);
        this.loadTrajectory();
      },
    });
    this.grid = hm;
    const c = this.gridCard;
    c.title.textContent = stat;
    c.sub.textContent = perLayer
      ? `${grid.layers} layers · one value per layer (no heads) · step ${fmtStep(grid.step)}`
      : `${grid.layers} layers × ${grid.heads} heads · step ${fmtStep(grid.step)}`;
    c.sub.title = info?.description ? info.description : '';
    const hasNaN = values.flat().some(Number.isNaN);
    const parts = [
      hm.el,
      h(
        'div',
        {class: 'legend-row'},
        legend(scale, {title: stat, nan: hasNaN}),
        // while a step's labels load, the legend stays (counts pending): the column keeps its width
        showLabels && !perLayer && this.labelRules ? labelsLegend(labelGrid, this.labelRules) : null,
      ),
    ];
    if (info?.description) parts.push(h('p', {class: 'description'}, info.description));
    clear(c.body).append(...parts);
    const stepPill = h(
      'span',
      {class: 'pill', id: 'grid-step', dataset: {step: String(grid.step)}},
      `step ${fmtStep(grid.step)}`,
    );
    clear(c.aside).append(...[probePill(grid.probe), stepPill].filter(Boolean)); // append(null) would print "null"
  }

  async loadTrajectory() {
    const {run, tag, selected} = this.state;
    if (!selected) return;
    this.trajSeq = (this.trajSeq || 0) + 1;
    const seq = this.trajSeq;
    let data;
    try {
      data = await getJSON('trajectory', {run, tag, layer: selected[0], head: selected[1]});
    } catch {
      data = null;
    }
    if (seq !== this.trajSeq || !data) return;
    this.traj = data;
    this.renderCharts();
  }

  async loadMeans() {
    const {run, tag} = this.state;
    this.meansSeq = (this.meansSeq || 0) + 1;
    const seq = this.meansSeq;
    const data = await getJSON('layer_means', {run, tag});
    if (seq !== this.meansSeq) return;
    this.means = data;
    this.renderCharts();
  }

  async loadPatterns() {
    const run = this.state.run;
    const info = tagsOfKind(this.app.tags, run, 'named_values').find((t) => t.name === 'pattern_classes');
    this.patternSeq = (this.patternSeq || 0) + 1;
    const seq = this.patternSeq;
    const data = info ? await getJSON('series', {run, tag: info.tag}).catch(() => null) : null;
    if (seq !== this.patternSeq) return;
    this.patterns = data;
    this.renderCharts();
  }

  async loadWordClasses() {
    const run = this.state.run;
    const info = tagsOfKind(this.app.tags, run, 'named_values').find((t) => t.name === 'word_classes');
    this.wordClassSeq = (this.wordClassSeq || 0) + 1;
    const seq = this.wordClassSeq;
    const data = info ? await getJSON('series', {run, tag: info.tag}).catch(() => null) : null;
    if (seq !== this.wordClassSeq) return;
    this.wordClasses = data;
    this.renderCharts();
  }

  renderCharts() {
    const step = this.stepper.step;
    const pick = (x) => {
      const i = this.state.steps.indexOf(x);
      if (i < 0) return;
      this.stepper.set(this.state.steps, i);
      this.onStep();
    };
    const stat = this.state.stat;
    if (this.traj && this.traj.tag === this.state.tag) {
      const t = this.traj;
      const c = this.trajCard;
      const unit =
        isPerLayer(stat) && this.state.info?.heads === 1 ? headName(t.layer, null) : headName(t.layer, t.head);
      c.title.textContent = `Trajectory · ${unit}`;
      c.sub.textContent =
        `${stat} over ${t.numSteps} logged step${t.numSteps === 1 ? '' : 's'}` +
        (t.steps.length < t.numSteps ? ` (${t.steps.length} shown, extremes kept)` : '') +
        ' · click a head to change';
      this.trajChart = lineChart({
        width: chartWidth(c.body),
        id: 'trajectory-chart',
        series: [{name: unit, color: seriesColor(0), xs: t.steps, ys: nums(t.values)}],
        bands: this.alertStrip.decorations(stat, t.layer, t.head, nums(t.values)),
        yLabel: stat,
        marker: step,
        onPick: pick,
      });
      clear(c.body).append(this.trajChart);
    }
    if (this.means && this.means.tag === this.state.tag) {
      const m = this.means;
      const c = this.meansCard;
      const L = m.means.length;
      c.sub.textContent =
        `mean of ${stat} over the heads of each layer` +
        (m.steps.length < m.numSteps ? ` (${m.steps.length} of ${m.numSteps} steps shown)` : '');
      const series = m.means.map((ys, l) => ({
        name: `L${l}`,
        color: layerColor(l, L),
        xs: m.steps,
        ys: nums(ys),
        width: 1.6,
      }));
      this.meansChart = lineChart({
        width: chartWidth(c.body),
        id: 'layer-means-chart',
        series,
        yLabel: stat,
        marker: step,
        onPick: pick,
        legend: true,
      });
      clear(c.body).append(this.meansChart);
    }
    const p = this.patterns;
    this.patternCard.el.hidden = !p;
    if (p) {
      const c = this.patternCard;
      c.sub.textContent = "share of heads in each of Kovaleva et al.'s classes (rules judged against a uniform head)";
      const series = p.names.map((name, k) => ({
        name,
        color: seriesColor(k), // as the report's figure of the same series
        xs: p.steps,
        ys: nums(p.values[k]),
        width: 1.6,
      }));
      this.patternChart = lineChart({
        width: chartWidth(c.body),
        id: 'pattern-chart',
        series,
        yLabel: 'share of heads',
        marker: step,
        onPick: pick,
        legend: true,
      });
      clear(c.body).append(this.patternChart);
    }
    const w = this.wordClasses;
    this.wordClassCard.el.hidden = !w;
    if (w) this.renderWordClasses(w, step, pick);
  }

  /** The word_classes series: per UD class, the mean over heads of its attention share (solid) and the share
   * a uniform head would give on the same sentences (<class>_uniform, dashed, same colour). */
  renderWordClasses(w, step, pick) {
    const c = this.wordClassCard;
    c.sub.textContent =
      'share of attention on each UD word class, mean over heads (dashed: a uniform head); per head: class_share_<class>';
    const classes = w.names.filter((name) => !name.endsWith('_uniform'));
    const series = [];
    classes.forEach((name, k) => {
      const color = seriesColor(k);
      series.push({name, color, xs: w.steps, ys: nums(w.values[w.names.indexOf(name)]), width: 1.6});
      const u = w.names.indexOf(`${name}_uniform`);
      if (u >= 0)
        series.push({name: `${name} (uniform)`, color, xs: w.steps, ys: nums(w.values[u]), width: 1, dashed: true});
    });
    this.wordClassChart = lineChart({
      width: chartWidth(c.body),
      id: 'word-class-chart',
      series,
      yLabel: 'share of attention',
      marker: step,
      onPick: pick,
      legend: true,
    });
    clear(c.body).append(this.wordClassChart);
  }
}

/** What the probe pass measured (the run's recorded probe length and how many examples were cut), or nothing
 * for logs that do not record it (older runs, statistics of other sentences). */
function probePill(probe) {
  if (!probe) return null;
  const {max_length: length, truncated, examples, longest} = probe;
  const whole = length === null ? 'as tokenized' : `limit ${length} tokens`;
  const text = truncated ? `${truncated} of ${examples} cut to ${length} tokens` : `${examples} examples whole`;
  const title = truncated
    ? `The probe pass measured each example up to ${length} tokens; ${truncated} of the ${examples} probe examples were longer and were cut (ProbeOptions(max_length=...)).`
    : `The probe pass measured all ${examples} probe examples whole (longest ${longest} tokens; ${whole}).`;
  return h(
    'span',
    {
      class: truncated ? 'pill pill-warn' : 'pill',
      id: 'probe-length',
      title,
      dataset: {maxLength: String(length), truncated: String(truncated)},
    },
    text,
  );
}

function argmax(values) {
  let best = null;
  let bv = -Infinity;
  values.forEach((row, i) => {
    row.forEach((v, j) => {
      if (Number.isFinite(v) && v > bv) {
        bv = v;
        best = [i, j];
      }
    });
  });
  return best || [0, 0];
}

/** The legend of the behaviour labels with each one's count; counts pending (…) without `labelGrid`. */
function labelsLegend(labelGrid, rules) {
  const counts = {};
  for (const row of labelGrid || []) for (const l of row) if (l) counts[l] = (counts[l] || 0) + 1;
  const items = rules.map(({label, glyph, text}) =>
    h(
      'span',
      {class: `label-item${counts[label] ? '' : ' zero'}`, title: text},
      h('b', {class: 'glyph'}, glyph),
      `${label} ${labelGrid ? counts[label] || 0 : '…'}`,
    ),
  );
  return h(
    'div',
    {class: 'labels-legend', id: 'labels-legend', dataset: {pending: String(!labelGrid)}},
    h('div', {class: 'legend-title'}, 'Behaviour (Clark et al. 2019)'),
    h('div', {class: 'label-items'}, ...items),
  );
}

// Drift: how far each head's attention moved from the reference model's (drift_cosine, drift_js). Drift measured
// from the model at step 0 is nil there by construction, so a run like that shows the latest step, how far each
// head moved over the last logged interval (is it still moving?) and each layer's mean over the steps (when did it
// move?). With a reference model of its own (reference_model=) the first step carries information too, and the
// view shows the first and the latest step side by side and the change between them.

import {getJSON, gridTags, isDriftStat, num, nums, rawText} from './api.js';
import {lineChart} from './charts.js';
import {card, clear, emptyState, fmt, fmtSigned, fmtStep, h, headName} from './dom.js';
import {heatmap} from './heatmap.js';
import {diverging, halfWidth, layerColor, legend, scaleForStat} from './scales.js';

// Each drift statistic's value for a head that did not move, and how close to it counts as not moved (float32).
const NO_DRIFT = {drift_cosine: 1, drift_js: 0};
const NIL_TOLERANCE = 1e-5;

/** Whether every finite value of `grid` is `stat`'s value for no drift: the first step of a run measured from it. */
export function isNilDrift(stat, grid) {
  const nil = NO_DRIFT[stat];
  if (nil === undefined) return false;
  const finite = grid.flat().filter(Number.isFinite);
  return finite.length > 0 && finite.every((v) => Math.abs(v - nil) <= NIL_TOLERANCE);
}

export class DriftView {
  constructor(app) {
    this.app = app;
    this.id = 'drift';
    this.label = 'Drift';
    this.body = h('div', {class: 'drift-rows'});
    this.el = h('div', {class: 'view view-drift', id: 'view-drift'}, this.body);
    this.seq = 0;
  }

  driftTags(tags, run) {
    return gridTags(tags, run).filter((t) => isDriftStat(t.stat));
  }

  hasData(tags, run) {
    return this.driftTags(tags, run).length > 0;
  }

  hide() {}

  async update() {
    const run = this.app.run;
    const tags = this.driftTags(this.app.tags, run);
    const seq = ++this.seq;
    if (!tags.length) {
      clear(this.body).append(
        emptyState(
          'No drift statistics in this run.',
          'drift_cosine and drift_js need a reference (pretrained) model: pass reference= to the callback.',
        ),
      );
      return;
    }
    const rows = await Promise.all(tags.map((t) => this.loadRow(run, t)));
    if (seq !== this.seq) return;
    clear(this.body).append(...rows);
  }

  async loadRow(run, info) {
    const tag = info.tag;
    const steps = await getJSON('steps', {run, tag});
    const list = steps.steps;
    const first = list[0];
    const latest = list[list.length - 1];
    const [a, b, means] = await Promise.all([
      getJSON('grid', {run, tag, step: first}),
      getJSON('grid', {run, tag, step: latest}),
      getJSON('layer_means', {run, tag}),
    ]);
    const stat = info.stat;
    const va = nums(a.values);
    const c = card(stat, {class: 'drift-card'});
    c.sub.textContent = info.description || '';
    clear(c.aside).append(h('span', {class: 'pill'}, `${list.length} logged step${list.length === 1 ? '' : 's'}`));
    if (!isNilDrift(stat, va)) {
      const [panels, legends] = this.againstFirst(stat, a, b, steps);
      c.body.append(h('div', {class: 'panels'}, ...panels, this.meansChart(stat, means)), legends);
      return c.el;
    }
    if (list.length === 1) {
      c.body.append(
        emptyState(
          `Only step ${fmtStep(first)} is logged so far.`,
          'Drift is measured from the model at that step, so it is nil there; the heads show from the next ' +
            'measured step.',
        ),
      );
      return c.el;
    }
    // the step before the latest, unless it is the nil first one (the change since then is the latest itself)
    const previous = list.length > 2 ? list[list.length - 2] : null;
    const p = previous === null ? null : await getJSON('grid', {run, tag, step: previous});
    const [panels, legends] = this.fromStart(stat, b, p, steps);
    c.body.append(
      h('div', {class: 'panels'}, ...panels, this.meansChart(stat, means)),
      legends,
      h(
        'p',
        {class: 'description', id: `drift-nil-note-${stat}`},
        `Step ${fmtStep(first)} is not shown: drift is measured from the model at that step, so it is nil there.`,
      ),
    );
    return c.el;
  }

  /** Panels of a run measured from its first step: the latest grid, and the change over the last interval. */
  fromStart(stat, b, p, steps) {
    const vb = nums(b.values);
    const vp = p ? nums(p.values) : null;
    const scale = scaleForStat(stat, {min: num(steps.min), max: num(steps.max)}, [vb]);
    const tip = (l, hd) => [
      headName(l, hd),
      ['latest', fmt(vb[l][hd], 4)],
      ...(vp ? [[`step ${fmtStep(p.step)}`, fmt(vp[l][hd], 4)]] : []),
    ];
    const panels = [
      panel('latest', `step ${fmtStep(b.step)}, from the start`, vb, rawOf(b), scale, `drift-latest-${stat}`, tip),
    ];
    const legends = [legend(scale, {title: stat, nan: vb.flat().some(Number.isNaN)})];
    if (vp) {
      const recent = vb.map((row, i) => row.map((v, j) => v - vp[i][j]));
      const rscale = changeScale(stat, recent);
      const since = `step ${fmtStep(p.step)} → ${fmtStep(b.step)}`;
      panels.push(panel('still moving', since, recent, null, rscale, `drift-recent-${stat}`, tip, signed));
      legends.push(changeLegend(stat, rscale, `change since step ${fmtStep(p.step)}`));
    }
    return [panels, h('div', {class: 'legend-row'}, ...legends)];
  }

  /** Panels of a run with a reference of its own: first and latest side by side, and the change between them. */
  againstFirst(stat, a, b, steps) {
    const va = nums(a.values);
    const vb = nums(b.values);
    const scale = scaleForStat(stat, {min: num(steps.min), max: num(steps.max)}, [va, vb]);
    const delta = vb.map((row, i) => row.map((v, j) => v - va[i][j]));
    const dscale = changeScale(stat, delta);
    const tip = (l, hd) => [headName(l, hd), ['first', fmt(va[l][hd], 4)], ['latest', fmt(vb[l][hd], 4)]];
    return [
      [
        panel('first', `step ${fmtStep(a.step)}`, va, rawOf(a), scale, `drift-first-${stat}`, tip),
        panel('latest', `step ${fmtStep(b.step)}`, vb, rawOf(b), scale, `drift-latest-${stat}`, tip),
        panel('change', 'latest − first', delta, null, dscale, `drift-delta-${stat}`, tip, signed),
      ],
      h(
        'div',
        {class: 'legend-row'},
        legend(scale, {title: stat, nan: [va, vb].some((g) => g.flat().some(Number.isNaN))}),
        changeLegend(stat, dscale, 'change (latest − first)'),
      ),
    ];
  }

  /** Each layer's mean drift over the logged steps: when each layer moved. */
  meansChart(stat, m) {
    const L = m.means.length;
    const shown = m.steps.length < m.numSteps ? ` (${m.steps.length} of ${m.numSteps} steps shown)` : '';
    return h(
      'div',
      {class: 'panel drift-means'},
      h(
        'div',
        {class: 'panel-title'},
        'each layer over the steps',
        h('span', {class: 'panel-sub'}, `mean of its heads${shown}`),
      ),
      lineChart({
        width: 500,
        height: 220,
        id: `drift-means-${stat}`,
        series: m.means.map((ys, l) => ({
          name: `L${l}`,
          color: layerColor(l, L),
          xs: m.steps,
          ys: nums(ys),
          width: 1.6,
        })),
        yLabel: stat,
        legend: true,
      }),
    );
  }
}

const rawOf = (g) => g.values.map((row) => row.map(rawText));
const signed = (v) => fmtSigned(v, 4);

// "More drift" is red on every change scale: cosine similarity falls as heads drift, JS divergence rises.
function changeScale(stat, delta) {
  return diverging(0, halfWidth(delta, 0, 1e-6), {invert: stat === 'drift_cosine'});
}

function changeLegend(stat, scale, title) {
  const captions = stat === 'drift_cosine' ? ['more drift', '', 'less drift'] : ['less drift', '', 'more drift'];
  return legend(scale, {title, format: (v) => fmtSigned(v, 2), captions});
}

/** One titled heatmap; `tip(layer, head)` gives the tooltip's head name and the lines after the cell's value. */
function panel(title, sub, values, raw, scale, id, tip, fmtV = (v) => fmt(v, 4)) {
  return h(
    'div',
    {class: 'panel'},
    h('div', {class: 'panel-title'}, title, h('span', {class: 'panel-sub'}, sub)),
    heatmap({
      id,
      values,
      raw,
      scale,
      cell: values[0].length > 12 ? 22 : 26,
      tooltip: (l, hd, v) => {
        const [name, ...rest] = tip(l, hd);
        return [name, [title, fmtV(v)], ...rest];
      },
    }).el,
  );
}

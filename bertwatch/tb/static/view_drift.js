// Drift: how far each head's attention moved from the pretrained model's (drift_cosine, drift_js),
// first and latest logged step side by side, and the change between them, on diverging scales.

import {getJSON, gridTags, isDriftStat, num, nums, rawText} from './api.js';
import {card, clear, emptyState, fmt, fmtSigned, fmtStep, h, headName} from './dom.js';
import {heatmap} from './heatmap.js';
import {diverging, halfWidth, legend, scaleForStat} from './scales.js';

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
    const steps = await getJSON('steps', {run, tag: info.tag});
    const first = steps.steps[0];
    const latest = steps.steps[steps.steps.length - 1];
    const [a, b] = await Promise.all([
      getJSON('grid', {run, tag: info.tag, step: first}),
      getJSON('grid', {run, tag: info.tag, step: latest}),
    ]);
    const va = nums(a.values);
    const vb = nums(b.values);
    const stat = info.stat;
    const scale = scaleForStat(stat, {min: num(steps.min), max: num(steps.max)}, [va, vb]);
    const delta = vb.map((row, i) => row.map((v, j) => v - va[i][j]));
    // "More drift" is red in every panel: cosine similarity falls as heads drift, JS divergence rises.
    const invert = stat === 'drift_cosine';
    const dscale = diverging(0, halfWidth(delta, 0, 1e-6), {invert});
    const panel = (title, sub, values, raw, sc, id, fmtV) =>
      h(
        'div',
        {class: 'panel'},
        h('div', {class: 'panel-title'}, title, h('span', {class: 'panel-sub'}, sub)),
        heatmap({
          id,
          values,
          raw,
          scale: sc,
          cell: values[0].length > 12 ? 22 : 26,
          tooltip: (l, hd, v) => [
            headName(l, hd),
            [title, fmtV(v)],
            ['first', fmt(va[l][hd], 4)],
            ['latest', fmt(vb[l][hd], 4)],
          ],
        }).el,
      );
    const rawOf = (g) => g.values.map((row) => row.map(rawText));
    const anyNaN = [va, vb].some((g) => g.flat().some(Number.isNaN));
    const c = card(stat, {class: 'drift-card'});
    c.sub.textContent = info.description || '';
    clear(c.aside).append(h('span', {class: 'pill'}, `${steps.steps.length} logged steps`));
    c.body.append(
      h(
        'div',
        {class: 'panels'},
        panel('first', `step ${fmtStep(first)}`, va, rawOf(a), scale, `drift-first-${stat}`, (v) => fmt(v, 4)),
        panel('latest', `step ${fmtStep(latest)}`, vb, rawOf(b), scale, `drift-latest-${stat}`, (v) => fmt(v, 4)),
        panel('change', 'latest − first', delta, null, dscale, `drift-delta-${stat}`, (v) => fmtSigned(v, 3)),
      ),
      h(
        'div',
        {class: 'legend-row'},
        legend(scale, {title: stat, nan: anyNaN}),
        legend(dscale, {
          title: 'change (latest − first)',
          format: (v) => fmtSigned(v, 2),
          captions: invert ? ['more drift', '', 'less drift'] : ['less drift', '', 'more drift'],
        }),
      ),
    );
    return c.el;
  }
}

// Clusters: a 2-D embedding of the heads (e.g. MDS of Jensen-Shannon distances between their attention),
// one point per head, coloured by layer. Clark et al. found that heads of the same layer cluster together.
// A map logged at several steps (BertWatchCallback(head_clusters=True)) gets a step slider; each head shows a
// trail from where it was at the step before.

import {getJSON, nums, tagsOfKind} from './api.js';
import {scatter} from './charts.js';
import {card, clear, emptyState, field, fmt, fmtStep, h, headName, setOptions, stepper} from './dom.js';
import {layerColor} from './scales.js';

export class ClustersView {
  constructor(app) {
    this.app = app;
    this.id = 'clusters';
    this.label = 'Clusters';
    this.optional = true; // tab shown only when some run has bertwatch/clustering/*
    this.tagSelect = h('select', {id: 'cluster-select', class: 'select', 'aria-label': 'Embedding'});
    this.tagSelect.addEventListener('change', () => {
      this.steps = null;
      this.load();
    });
    this.stepper = stepper({prefix: 'cluster-', onChange: () => this.load(this.steps[this.stepper.index])});
    this.stepper.el.hidden = true;
    this.steps = null;
    this.toolbar = h('div', {class: 'toolbar'}, field('Embedding', this.tagSelect), this.stepper.el);
    this.card = card('Head embedding', {class: 'scatter-card'});
    this.emptyEl = h('div', {});
    this.el = h('div', {class: 'view view-clusters', id: 'view-clusters'}, this.toolbar, this.emptyEl, this.card.el);
    this.seq = 0;
  }

  hasData(tags, run) {
    return tagsOfKind(tags, run, 'head_embedding').length > 0;
  }

  hide() {}

  async update() {
    const tags = tagsOfKind(this.app.tags, this.app.run, 'head_embedding');
    clear(this.emptyEl);
    this.card.el.hidden = this.toolbar.hidden = tags.length === 0;
    if (!tags.length) {
      this.emptyEl.append(
        emptyState(
          'No head embedding in this run.',
          'Logged as bertwatch/clustering/<name> by `bertwatch probe-syntax`, or at every probe step by BertWatchCallback(head_clusters=True).',
        ),
      );
      return;
    }
    setOptions(
      this.tagSelect,
      tags.map((t) => ({value: t.tag, text: t.name || t.tag})),
    );
    await this.load();
  }

  async load(step) {
    const seq = ++this.seq;
    const params = {run: this.app.run, tag: this.tagSelect.value};
    if (step !== undefined && !this.stepper.follow) params.step = step;
    const data = await getJSON('embedding', params);
    if (seq !== this.seq) return;
    const coords = nums(data.coords);
    const {layers: L, heads: H} = data;
    const steps = data.steps || [data.step];
    this.stepper.el.hidden = steps.length < 2;
    if (!this.steps || this.steps.length !== steps.length || this.stepper.follow)
      this.stepper.set(steps, steps.indexOf(data.step));
    this.steps = steps;
    const previous = data.previous ? nums(data.previous) : null;
    const trails = previous
      ? coords.map(([x, y], i) => ({
          x0: previous[i][0],
          y0: previous[i][1],
          x1: x,
          y1: y,
          color: layerColor(Math.floor(i / H), L),
        }))
      : [];
    const points = coords.map(([x, y], i) => {
      const l = Math.floor(i / H);
      const k = i % H;
      return {
        x,
        y,
        color: layerColor(l, L),
        tooltip: [headName(l, k), ['x', fmt(x, 3)], ['y', fmt(y, 3)]],
        data: {layer: String(l), head: String(k)},
      };
    });
    const legendItems = Array.from({length: L}, (_, l) => ({color: layerColor(l, L), label: `L${l}`}));
    const c = this.card;
    c.title.textContent = `Head embedding · ${data.name || data.tag}`;
    c.sub.textContent = `${L * H} heads, coloured by layer · step ${fmtStep(data.step)}`;
    const moved = previous
      ? ' Lines lead from where each head was at the previous logged step (maps aligned by Procrustes).'
      : '';
    clear(c.body).append(
      scatter({id: 'cluster-scatter', points, legendItems, trails}),
      h('p', {class: 'description'}, `Nearby points are heads that attend alike. Hover a point for its head.${moved}`),
    );
  }
}

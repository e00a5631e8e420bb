// Compare: one statistic in two runs, side by side on a shared scale, or as a difference (A − B).
// The step slider runs over the union of both runs' steps; each run shows its latest step at or before it.

import {getJSON, gridTags, num, nums, rawText, statGroup} from './api.js';
import {card, clear, emptyState, field, fmt, fmtSigned, fmtStep, h, headName, setOptions, stepper} from './dom.js';
import {heatmap} from './heatmap.js';
import {diverging, halfWidth, legend, scaleForStat} from './scales.js';

function atOrBefore(steps, step) {
  let best = null;
  for (const s of steps) if (s <= step && (best === null || s > best)) best = s;
  return best;
}

export class CompareView {
  constructor(app) {
    this.app = app;
    this.id = 'compare';
    this.label = 'Compare';
    this.mode = 'side';
    this.aSelect = h('select', {id: 'compare-a', class: 'select', 'aria-label': 'Run A'});
    this.bSelect = h('select', {id: 'compare-b', class: 'select', 'aria-label': 'Run B'});
    this.statSelect = h('select', {id: 'compare-stat', class: 'select', 'aria-label': 'Statistic'});
    for (const sel of [this.aSelect, this.bSelect, this.statSelect])
      sel.addEventListener('change', () => this.loadSteps());
    this.stepper = stepper({prefix: 'compare-', onChange: () => this.loadGrids()});
    const seg = (mode, text) => {
      const b = h('button', {type: 'button', class: 'seg-btn', id: `compare-mode-${mode}`, dataset: {mode}}, text);
      b.addEventListener('click', () => {
        this.mode = mode;
        this.renderGrids();
      });
      return b;
    };
    this.modeButtons = [seg('side', 'Side by side'), seg('diff', 'Difference A − B')];
    this.toolbar = h(
      'div',
      {class: 'toolbar'},
      field('Run A', this.aSelect),
      field('Run B', this.bSelect),
      field('Statistic', this.statSelect),
      h('div', {class: 'segmented', role: 'group'}, ...this.modeButtons),
      this.stepper.el,
    );
    this.body = h('div', {class: 'compare-body'});
    this.emptyEl = h('div', {});
    this.el = h('div', {class: 'view view-compare', id: 'view-compare'}, this.toolbar, this.emptyEl, this.body);
    this.seq = 0;
  }

  gridRuns(tags) {
    return Object.keys(tags.runs || {})
      .filter((r) => gridTags(tags, r).length > 0)
      .sort();
  }

  hasData(tags) {
    return this.gridRuns(tags).length >= 2;
  }

  hide() {}

  async update(reason) {
    const runs = this.gridRuns(this.app.tags);
    clear(this.emptyEl);
    this.body.hidden = this.toolbar.hidden = runs.length < 2;
    if (runs.length < 2) {
      this.emptyEl.append(
        emptyState(
          'Comparing needs two runs with head statistics.',
          'Point TensorBoard at a directory that holds several runs.',
        ),
      );
      return;
    }
    const a = setOptions(this.aSelect, runs, this.aSelect.value || this.app.run);
    // Default B: the most recently written other run.
    const latest = (r) => Math.max(0, ...Object.values(this.app.tags.runs[r]).map((i) => i.maxWallTime || 0));
    const otherDefault = runs.filter((r) => r !== a).sort((x, y) => latest(y) - latest(x))[0];
    setOptions(this.bSelect, runs, this.bSelect.value && this.bSelect.value !== a ? this.bSelect.value : otherDefault);
    await this.loadSteps(reason);
  }

  async loadSteps() {
    const tags = this.app.tags;
    const a = this.aSelect.value;
    const b = this.bSelect.value;
    const statsA = gridTags(tags, a);
    const statsB = new Set(gridTags(tags, b).map((t) => t.stat));
    const common = statsA.filter((t) => statsB.has(t.stat));
    setOptions(
      this.statSelect,
      common.map((t) => ({value: t.stat, text: t.stat, group: statGroup(t.stat)})),
      this.statSelect.value || (common.find((t) => t.stat === 'cls_mass') || common[0])?.stat,
    );
    const stat = this.statSelect.value;
    if (!stat) {
      clear(this.body).append(emptyState('These runs share no statistic.'));
      return;
    }
    const tag = common.find((t) => t.stat === stat).tag;
    const seq = ++this.seq;
    const [sa, sb] = await Promise.all([getJSON('steps', {run: a, tag}), getJSON('steps', {run: b, tag})]);
    if (seq !== this.seq) return;
    const oldStep = this.stepper.step;
    const union = [...new Set([...sa.steps, ...sb.steps])].sort((x, y) => x - y);
    let index = union.length - 1;
    if (!this.stepper.follow && oldStep !== null && union.includes(oldStep)) index = union.indexOf(oldStep);
    this.stepper.set(union, index);
    this.ctx = {
      a,
      b,
      tag,
      stat,
      stepsA: sa.steps,
      stepsB: sb.steps,
      range: {min: Math.min(num(sa.min), num(sb.min)), max: Math.max(num(sa.max), num(sb.max))},
    };
    await this.loadGrids();
  }

  async loadGrids() {
    const c = this.ctx;
    if (!c) return;
    const step = this.stepper.step;
    const stepA = atOrBefore(c.stepsA, step);
    const stepB = atOrBefore(c.stepsB, step);
    this.gridSeq = (this.gridSeq || 0) + 1;
    const seq = this.gridSeq;
    const [ga, gb] = await Promise.all([
      stepA === null ? null : getJSON('grid', {run: c.a, tag: c.tag, step: stepA}),
      stepB === null ? null : getJSON('grid', {run: c.b, tag: c.tag, step: stepB}),
    ]);
    if (seq !== this.gridSeq) return;
    this.grids = {ga, gb};
    this.renderGrids();
  }

  renderGrids() {
    for (const b of this.modeButtons) b.classList.toggle('active', b.dataset.mode === this.mode);
    const c = this.ctx;
    if (!c || !this.grids) return;
    const {ga, gb} = this.grids;
    const body = clear(this.body);
    const va = ga ? nums(ga.values) : null;
    const vb = gb ? nums(gb.values) : null;
    if (this.mode === 'diff') {
      const k = card(`${c.stat}: A − B`, {class: 'compare-card'});
      k.sub.textContent = `A = ${c.a} (step ${ga ? fmtStep(ga.step) : '—'}) · B = ${c.b} (step ${gb ? fmtStep(gb.step) : '—'})`;
      if (!va || !vb || va.length !== vb.length || va[0].length !== vb[0].length) {
        k.body.append(
          emptyState(
            'No difference to show.',
            !va || !vb ? 'One run has no step at or before this one.' : 'The runs have different model shapes.',
          ),
        );
      } else {
        const diff = va.map((row, i) => row.map((v, j) => v - vb[i][j]));
        const scale = diverging(0, halfWidth(diff, 0, 1e-6));
        const ranked = diff
          .flatMap((row, l) => row.map((d, hd) => ({d, l, hd})))
          .filter((x) => Number.isFinite(x.d))
          .sort((x, y) => Math.abs(y.d) - Math.abs(x.d))
          .slice(0, 10);
        const table = h(
          'table',
          {class: 'rank-table', id: 'compare-top'},
          h('thead', {}, h('tr', {}, h('th', {}, 'head'), h('th', {}, 'A'), h('th', {}, 'B'), h('th', {}, 'A − B'))),
          h(
            'tbody',
            {},
            ...ranked.map(({d, l, hd}) =>
              h(
                'tr',
                {},
                h('td', {}, headName(l, hd)),
                h('td', {}, fmt(va[l][hd], 3)),
                h('td', {}, fmt(vb[l][hd], 3)),
                h(
                  'td',
                  {class: 'num'},
                  h(
                    'span',
                    {
                      class: 'chip',
                      style: {
                        background: scale.color(d),
                        color: Math.abs(d) > 0.6 * scale.domain[1] ? '#fff' : '#1f1f1f',
                      },
                    },
                    fmtSigned(d, 3),
                  ),
                ),
              ),
            ),
          ),
        );
        k.body.append(
          h(
            'div',
            {class: 'diff-layout'},
            h(
              'div',
              {},
              heatmap({
                id: 'compare-diff',
                values: diff,
                scale,
                tooltip: (l, hd, v) => [
                  headName(l, hd),
                  ['A − B', fmtSigned(v, 4)],
                  ['A', fmt(va[l][hd], 4)],
                  ['B', fmt(vb[l][hd], 4)],
                ],
              }).el,
              h(
                'div',
                {class: 'legend-row'},
                legend(scale, {
                  title: `${c.stat}, A − B`,
                  format: (v) => fmtSigned(v, 2),
                  captions: ['B higher', 'equal', 'A higher'],
                }),
              ),
            ),
            h('div', {class: 'rank'}, h('div', {class: 'legend-title'}, 'Largest differences'), table),
          ),
        );
      }
      body.append(k.el);
      return;
    }
    const scale = scaleForStat(c.stat, c.range, [va || [], vb || []]);
    const row = h('div', {class: 'compare-row'});
    const sides = [
      ['A', c.a, ga, va, 'compare-a-heatmap'],
      ['B', c.b, gb, vb, 'compare-b-heatmap'],
    ];
    for (const [letter, run, g, v, id] of sides) {
      const k = card(`${letter} · ${run}`, {class: 'compare-card'});
      k.sub.textContent = g ? `${c.stat} · step ${fmtStep(g.step)}` : 'no step at or before this one';
      if (g) {
        const other = letter === 'A' ? vb : va;
        const otherAt = (l, hd) => (other && other[l] && other[l][hd] !== undefined ? other[l][hd] : NaN);
        k.body.append(
          heatmap({
            id,
            values: v,
            raw: g.values.map((r) => r.map(rawText)),
            scale,
            tooltip: (l, hd, x) => [
              `${letter}: ${headName(l, hd)}`,
              [c.stat, fmt(x, 4)],
              [letter === 'A' ? 'B' : 'A', fmt(otherAt(l, hd), 4)],
            ],
          }).el,
        );
      }
      row.append(k.el);
    }
    const anyNaN = [va, vb].some((g) => g?.flat().some(Number.isNaN));
    body.append(row, h('div', {class: 'legend-row'}, legend(scale, {title: `${c.stat} (shared scale)`, nan: anyNaN})));
  }
}

// The run-verdict strip of the Heads view (/verdict): the level now (healthy, at risk, failing) and since which
// step, its reasons in words (the evidence that decided first), one square per written step (click one for that
// step's reasons), and three small charts of the probe set's run-health signals the rules read, with the
// thresholds drawn, the probe loss's interval, and the steps at risk or failing shaded. Hidden when the run wrote
// no verdict.

import {getJSON, nums, tagsOfKind, VERDICT_CLASS, VERDICT_TAG} from './api.js';
import {lineChart} from './charts.js';
import {clear, fmt, fmtStep, h} from './dom.js';

const COLORS = ['#2e7d32', '#ef6c00', '#c62828'];

/** A share in words: 3%, 0.25%. */
function pct(v) {
  if (!Number.isFinite(v)) return fmt(v);
  const p = v * 100;
  return `${p >= 1 ? Math.round(p) : fmt(p, 2)}%`;
}

export class VerdictStrip {
  constructor() {
    this.seq = 0;
    this.data = null;
    this.picked = null;
    this.summary = h('div', {class: 'verdict-summary', id: 'verdict-summary'});
    this.reasons = h('ul', {class: 'verdict-reasons', id: 'verdict-reasons'});
    this.timeline = h('div', {class: 'verdict-timeline', id: 'verdict-timeline', role: 'list'});
    this.charts = h('div', {class: 'verdict-charts', id: 'verdict-charts'});
    this.el = h(
      'section',
      {class: 'card verdict-strip', id: 'verdict-strip'},
      this.summary,
      this.reasons,
      this.timeline,
      this.charts,
    );
    this.el.hidden = true;
  }

  /** Fetch the run's verdict (hidden when the run wrote none). */
  async load(app, run) {
    const seq = ++this.seq;
    const has = tagsOfKind(app.tags, run, 'named_values').some((t) => t.tag === VERDICT_TAG);
    const data = has ? await getJSON('verdict', {run}).catch(() => null) : null;
    if (seq !== this.seq) return;
    if (this.run !== run) this.picked = null;
    this.run = run;
    this.data = data;
    this.render();
  }

  render() {
    const d = this.data;
    this.el.hidden = !d;
    if (!d) return;
    const now = d.now;
    for (const css of Object.values(VERDICT_CLASS)) this.el.classList.remove(css);
    this.el.classList.add(VERDICT_CLASS[now.label]);
    const judged = d.steps.length;
    clear(this.summary).append(
      h('b', {}, 'Run verdict'),
      ' ',
      h('span', {class: `verdict-badge ${VERDICT_CLASS[now.label]}`, id: 'verdict-level'}, now.label),
      now.level > 0 && now.since !== now.step
        ? ` since step ${fmtStep(now.since)} · judged at step ${fmtStep(now.step)}`
        : ` at step ${fmtStep(now.step)}`,
      ` (${judged} judged step${judged === 1 ? '' : 's'}, compared with step ${fmtStep(d.steps[0])})`,
    );
    this.renderTimeline();
    this.renderReasons();
    this.renderCharts();
  }

  /** The reasons of the picked step (the latest by default). */
  renderReasons() {
    const d = this.data;
    const i = this.picked === null ? d.steps.length - 1 : d.steps.indexOf(this.picked);
    const reasons = d.reasons[i];
    const at =
      this.picked === null ? [] : [h('li', {class: 'verdict-at'}, `at step ${fmtStep(d.steps[i])}: ${d.labels[i]}`)];
    const items =
      reasons === null
        ? [h('li', {class: 'description'}, 'no reasons kept for this step')]
        : reasons.length
          ? reasons.map((r) => h('li', {}, r))
          : [h('li', {class: 'description'}, 'no rule holds: nothing the run has shown so far says it is failing')];
    clear(this.reasons).append(...at, ...items);
  }

  renderTimeline() {
    const d = this.data;
    clear(this.timeline).append(
      h('span', {class: 'verdict-timeline-label'}, 'step by step'),
      ...d.steps.map((step, i) => {
        const level = d.level[i];
        const label = d.labels[i];
        const square = h(
          'button',
          {
            type: 'button',
            role: 'listitem',
            class: `verdict-step ${VERDICT_CLASS[label]}${this.picked === step ? ' picked' : ''}`,
            dataset: {step: String(step), level: String(level)},
            title: `step ${fmtStep(step)}: ${label}${d.reasons[i]?.length ? ` — ${d.reasons[i].join('; ')}` : ''}`,
          },
          fmtStep(step),
        );
        square.addEventListener('click', () => {
          this.picked = this.picked === step ? null : step;
          this.renderTimeline();
          this.renderReasons();
        });
        return square;
      }),
    );
  }

  /** Bands over the steps at risk and failing, each up to the next judged step, over [lo, hi]. */
  bands(lo, hi) {
    const d = this.data;
    const out = [];
    d.steps.forEach((step, i) => {
      const level = d.level[i];
      if (!level) return;
      const next = d.steps[i + 1] ?? step;
      out.push({name: null, color: COLORS[level], opacity: 0.1, xs: [step, next], lo: [lo, lo], hi: [hi, hi]});
    });
    return out;
  }

  renderCharts() {
    const d = this.data;
    const hv = d.health;
    const st = d.settings;
    clear(this.charts);
    if (!hv?.steps?.length) return;
    const width = Math.max(240, Math.min(440, Math.floor((this.el.clientWidth - 60) / 3)));
    const layers = hv.lowerLayers;
    const named = layers.length > 1 ? `layers ${layers[0]}–${layers[layers.length - 1]}` : `layer ${layers[0]}`;
    const log = nums(hv.lowerGradient).map((v) => (v > 0 ? Math.log10(v) : NaN));
    const panels = [
      {
        id: 'verdict-chart-gradient',
        title: `Gradient norm of ${layers.length ? named : 'the lower layers'}, share of step ${fmtStep(hv.steps[0])}`,
        ys: log,
        yFormat: (v) => pct(10 ** v),
        hlines: [
          {y: Math.log10(st.risk_fraction), label: `at risk < ${pct(st.risk_fraction)}`, cls: 'risk'},
          {y: Math.log10(st.vanish_fraction), label: `vanished < ${pct(st.vanish_fraction)}`, cls: 'fail'},
        ],
      },
      {
        id: 'verdict-chart-share',
        title: 'Probe examples predicted as the most frequent class',
        ys: nums(hv.predictionShare),
        yFormat: pct,
        hlines: [{y: st.collapse_share, label: `collapsed ≥ ${pct(st.collapse_share)}`, cls: 'fail'}],
      },
      {
        id: 'verdict-chart-loss',
        title: `Probe loss ÷ the constant prediction's, with its ${pct(st.confidence)} interval`,
        ys: nums(hv.lossRatio),
        interval: hv.lossLow ? {lo: nums(hv.lossLow), hi: nums(hv.lossHigh)} : null,
        yFormat: (v) => fmt(v, 3),
        hlines: [
          {y: 1, label: "the constant prediction's: learning when the band is below", cls: 'zero'},
          {
            y: st.loss_line,
            label: `not learning when the band is above ${fmt(st.loss_line, 3)}`,
            cls: 'fail',
          },
        ],
      },
    ];
    for (const p of panels) {
      if (!p.ys.some(Number.isFinite)) continue;
      const spread = p.interval ? p.interval.lo.concat(p.interval.hi) : [];
      const finite = p.ys
        .concat(
          p.hlines.map((r) => r.y),
          spread,
        )
        .filter(Number.isFinite);
      const interval = p.interval
        ? [{name: null, color: '#37474f', opacity: 0.15, xs: hv.steps, lo: p.interval.lo, hi: p.interval.hi}]
        : [];
      const chart = lineChart({
        width,
        height: 170,
        id: p.id,
        series: [{name: p.title, color: '#37474f', xs: hv.steps, ys: p.ys}],
        bands: this.bands(Math.min(...finite), Math.max(...finite)).concat(interval),
        hlines: p.hlines,
        yFormat: p.yFormat,
        legend: false,
      });
      this.charts.append(h('div', {class: 'verdict-chart'}, h('div', {class: 'card-sub'}, p.title), chart));
    }
    this.charts.append(
      h(
        'div',
        {class: 'description verdict-more', id: 'verdict-more'},
        "The charts show the 32-example probe set's signals; the verdict also weighs the Trainer's evaluations " +
          'and logged training loss against the constant prediction (their curves: the Scalars tab), and the ' +
          'reasons above say which evidence decided.',
      ),
    );
  }
}

// The stability-alert strip of the Heads view: which heads are (or were) in alert, for which rule, since which
// step (/alerts). Clicking an alert draws that head's trajectory of the rule's quantity with its reference and
// threshold, and the Heads view marks the alert's steps on its own trajectory (decorations()).

import {getJSON, nums, tagsOfKind} from './api.js';
import {chartWidth, lineChart} from './charts.js';
import {clear, fmt, fmtStep, h, headName} from './dom.js';
import {MARKS} from './scales.js';

// Rule texts and the statistics a quantity sums come with /alerts (bertwatch.core.alerts, their one home).
// Alerts listed before a "show all" button (a diverging run can put most heads in alert).
const SHOWN = 24;

export class AlertStrip {
  /** onPick(episode, stat): an alert was clicked; stat is the head statistic to show (null for none). */
  constructor({onPick}) {
    this.onPick = onPick;
    this.data = null;
    this.picked = null;
    this.seq = 0;
    this.detailSeq = 0;
    this.summary = h('div', {class: 'alert-summary', id: 'alert-summary'});
    this.items = h('div', {class: 'alert-items', id: 'alert-items', role: 'list'});
    this.detail = h('div', {class: 'alert-detail', id: 'alert-detail'});
    this.el = h('section', {class: 'card alert-strip', id: 'alert-strip'}, this.summary, this.items, this.detail);
    this.el.hidden = true;
  }

  /** Fetch the run's alerts (hidden when the run wrote none). */
  async load(app, run) {
    const seq = ++this.seq;
    const has = tagsOfKind(app.tags, run, 'alerts').length > 0;
    const data = has ? await getJSON('alerts', {run}).catch(() => null) : null;
    if (seq !== this.seq) return;
    if (this.run !== run) {
      this.picked = null;
      this.showAll = false;
    }
    this.run = run;
    this.app = app;
    this.data = data;
    this.render();
  }

  /** The rule's quantity of an episode: 'entropy', 'max_logit', 'sink_mass'. */
  quantity(episode) {
    return this.data?.quantities?.[episode.rule] || null;
  }

  /** The head statistics the rule's quantity of an episode sums (empty when unknown). */
  statsOf(episode) {
    return this.data?.quantityStats?.[this.quantity(episode)] || [];
  }

  /** A rule's name for people: its words, with its meaning in the title of the alert. */
  ruleName(rule) {
    return rule.replaceAll('_', ' ');
  }

  render() {
    const d = this.data;
    this.el.hidden = !d;
    if (!d) return;
    const episodes = [...d.episodes].sort(
      (a, b) => b.active - a.active || a.since - b.since || a.layer - b.layer || (a.head ?? 0) - (b.head ?? 0),
    );
    const active = episodes.filter((e) => e.active).length;
    const last = d.steps.length ? d.steps[d.steps.length - 1] : null;
    clear(this.summary).append(
      h('b', {}, 'Stability alerts'),
      ' · ',
      episodes.length
        ? `${unitsText(episodes.filter((e) => e.active))} in alert at step ${fmtStep(last)}, ${episodes.length} alert${episodes.length === 1 ? '' : 's'} in all`
        : `none in ${d.steps.length} judged step${d.steps.length === 1 ? '' : 's'}`,
      ` (reference: step ${fmtStep(d.referenceStep ?? 0)})`,
    );
    this.el.classList.toggle('has-alerts', active > 0);
    const shown = this.showAll ? episodes : episodes.slice(0, SHOWN);
    const more =
      episodes.length > shown.length
        ? h(
            'button',
            {
              type: 'button',
              class: 'alert-more',
              id: 'alert-more',
              onclick: () => {
                this.showAll = true;
                this.render();
              },
            },
            `show all ${episodes.length}`,
          )
        : null;
    clear(this.items).append(
      ...shown.map((e) => {
        const until = e.active ? '' : ` – ${fmtStep(e.last)}`;
        const item = h(
          'button',
          {
            type: 'button',
            role: 'listitem',
            class: `alert-item${e.active ? ' active' : ''}${this.isPicked(e) ? ' picked' : ''}`,
            dataset: {layer: String(e.layer), head: String(e.head), rule: e.rule, since: String(e.since)},
            title: `${d.ruleTexts?.[e.rule] || e.rule}. ${this.quantity(e) || ''} ${fmt(e.value, 4)} at step ${fmtStep(e.last)}; reference ${fmt(e.reference, 4)}, threshold ${fmt(e.threshold, 4)}`,
          },
          h('b', {}, headName(e.layer, e.head)),
          ` ${this.ruleName(e.rule)} · since ${fmtStep(e.since)}${until}`,
        );
        item.addEventListener('click', () => this.pick(e));
        return item;
      }),
      ...(more ? [more] : []),
    );
    if (this.picked) this.renderDetail();
  }

  isPicked(e) {
    const p = this.picked;
    return !!p && p.layer === e.layer && p.head === e.head && p.rule === e.rule && p.since === e.since;
  }

  pick(episode) {
    this.picked = episode;
    for (const item of this.items.querySelectorAll('.alert-item')) {
      const ds = item.dataset;
      const same =
        +ds.layer === episode.layer &&
        ds.head === String(episode.head) &&
        ds.rule === episode.rule &&
        +ds.since === episode.since;
      item.classList.toggle('picked', same);
    }
    this.renderDetail();
    const stats = this.statsOf(episode);
    this.onPick(episode, stats[0] || null);
  }

  /** The picked head's trajectory of its rule's quantity, with the reference, the threshold and the alert's
   * first step marked. */
  async renderDetail() {
    const e = this.picked;
    const q = this.quantity(e);
    const stats = this.statsOf(e);
    const seq = ++this.detailSeq;
    const tags = stats.map((stat) => `bertwatch/heads/${stat}`);
    const runTags = this.app.tags.runs?.[this.run] || {};
    if (!tags.length || !tags.every((tag) => runTags[tag])) {
      clear(this.detail).append(h('p', {class: 'description'}, `No ${q} grids in this run to draw.`));
      return;
    }
    const parts = await Promise.all(
      tags.map((tag) => getJSON('trajectory', {run: this.run, tag, layer: e.layer, head: e.head ?? 0, max_points: 0})),
    ).catch(() => null);
    if (seq !== this.detailSeq || !parts) return;
    // Every point of each series (max_points 0), summed step by step where all have one.
    const maps = parts.map((p) => new Map(p.steps.map((step, i) => [step, nums(p.values)[i]])));
    const xs = parts[0].steps.filter((step) => maps.every((m) => m.has(step)));
    const ys = xs.map((step) => maps.reduce((acc, m) => acc + m.get(step), 0));
    const chart = lineChart({
      width: chartWidth(this.detail, 640),
      height: 200,
      id: 'alert-chart',
      series: [{name: `${headName(e.layer, e.head)} ${q}`, color: MARKS.alert, xs, ys}],
      yLabel: q,
      marker: e.since,
      hlines: [
        {y: e.reference, label: `reference ${fmt(e.reference, 3)}`, cls: 'reference', id: 'alert-reference'},
        {y: e.threshold, label: `threshold ${fmt(e.threshold, 3)}`, cls: 'delta', id: 'alert-threshold'},
      ],
      legend: false,
    });
    clear(this.detail).append(
      h(
        'div',
        {class: 'card-sub'},
        `${headName(e.layer, e.head)} · ${this.ruleName(e.rule)} since step ${fmtStep(e.since)} (dotted line) · ${q}` +
          (stats.length > 1 ? ` = ${stats.join(' + ')}` : ''),
      ),
      chart,
    );
  }

  /** Bands over the steps a head was in alert, for a trajectory of `stat` with values `ys` (empty when none). */
  decorations(stat, layer, head, ys) {
    const d = this.data;
    if (!d) return [];
    const finite = ys.filter(Number.isFinite);
    if (!finite.length) return [];
    const lo = Math.min(...finite);
    const hi = Math.max(...finite);
    // An episode covers its steps up to the next judged step (so a one-step episode still has a width).
    const after = (step) => d.steps.find((x) => x > step) ?? step;
    return d.episodes
      .filter((e) => e.layer === layer && (e.head ?? 0) === head && this.statsOf(e).includes(stat))
      .map((e, k) => ({
        name: k ? null : 'in alert',
        color: MARKS.alert,
        opacity: 0.12,
        id: k ? null : 'trajectory-alert-band',
        xs: [e.since, after(e.last)],
        lo: [lo, lo],
        hi: [hi, hi],
      }));
  }
}

/** "3 heads", "1 layer", "3 heads and 1 layer": what the active episodes put in alert (a layer rule's has no head). */
function unitsText(active) {
  const layers = active.filter((e) => e.head === null || e.head === undefined).length;
  const heads = active.length - layers;
  const parts = [];
  if (heads || !layers) parts.push(`${heads} head${heads === 1 ? '' : 's'}`);
  if (layers) parts.push(`${layers} layer${layers === 1 ? '' : 's'}`);
  return parts.join(' and ');
}

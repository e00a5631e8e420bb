// Runs: every run under the log folder that wrote a verdict, side by side (/runs, the table `bertwatch sweep`
// prints): its verdict now, the step, its verdict over the judged steps as a strip, its learning rate and seed as
// the Trainer logged them, and the first reason, ranked worst first; then the failing runs still training, to stop
// now, with the training steps that saves. Sort by any column, filter by name, verdict or reason; a run still
// training updates live. Click a run's name to open it in the other views.

import {getJSON, VERDICT_CLASS, VERDICT_TAG} from './api.js';
import {card, clear, emptyState, field, fmt, h} from './dom.js';

const MARKS = {'+': 'healthy', '?': 'cannot-tell', '!': 'at-risk', X: 'failing'};
const LABELS = ['failing', 'at risk', 'cannot tell', 'healthy'];

// column: [key, header, sort value of a row, initial direction (-1: largest first)]
const COLUMNS = [
  ['rank', '#', (r) => r.rank, -1],
  ['run', 'Run', (r) => r.run, 1],
  ['verdict', 'Verdict', (r) => r.rank, -1],
  ['step', 'Step', (r) => r.step, -1],
  ['history', 'History', null, 0],
  ['lr', 'Learning rate', (r) => r.learning_rate ?? -Infinity, -1],
  ['seed', 'Seed', (r) => r.seed ?? -Infinity, 1],
  ['reason', 'Reason', (r) => (r.reasons[0] || '').toLowerCase(), 1],
];

function compare(a, b) {
  if (typeof a === 'string' || typeof b === 'string') return String(a).localeCompare(String(b));
  return a - b;
}

export class RunsView {
  constructor(app) {
    this.app = app;
    this.id = 'runs';
    this.label = 'Runs';
    this.optional = true; // tab shown only when some run wrote a verdict
    this.data = null;
    this.sort = {key: 'rank', dir: -1};
    this.seq = 0;
    this.filter = h('input', {
      id: 'runs-filter',
      class: 'input',
      type: 'search',
      placeholder: 'name, verdict or reason',
      'aria-label': 'Filter runs',
    });
    this.filter.addEventListener('input', () => this.render());
    this.level = h('select', {id: 'runs-level', class: 'select', 'aria-label': 'Verdict'});
    for (const value of ['', ...LABELS]) this.level.append(h('option', {value}, value || 'every verdict'));
    this.level.addEventListener('change', () => this.render());
    this.count = h('span', {class: 'toolbar-note', id: 'runs-count'});
    this.toolbar = h('div', {class: 'toolbar'}, field('Filter', this.filter), field('Show', this.level), this.count);
    this.stop = card('Stop these now', {class: 'runs-stop-card'});
    this.stop.el.id = 'runs-stop';
    this.table = card('Every run, worst first', {class: 'runs-card'});
    this.emptyEl = h('div', {});
    this.el = h(
      'div',
      {class: 'view view-runs', id: 'view-runs', hidden: true},
      this.toolbar,
      this.emptyEl,
      this.stop.el,
      this.table.el,
    );
  }

  hasData(tags, run) {
    return Object.hasOwn(tags.runs?.[run] || {}, VERDICT_TAG);
  }

  hide() {}

  async update() {
    const seq = ++this.seq;
    const data = await getJSON('runs').catch((error) => ({error}));
    if (seq !== this.seq) return;
    this.data = data;
    this.render();
  }

  rows() {
    const text = this.filter.value.trim().toLowerCase();
    const level = this.level.value;
    const [, , value] = COLUMNS.find(([key]) => key === this.sort.key);
    const order = new Map(this.data.runs.map((r, i) => [r.run, i]));
    return this.data.runs
      .filter((r) => !level || r.label === level)
      .filter((r) => !text || [r.run, r.label, ...r.reasons].some((s) => s.toLowerCase().includes(text)))
      .sort((a, b) => this.sort.dir * compare(value(a), value(b)) || order.get(a.run) - order.get(b.run));
  }

  render() {
    const d = this.data;
    clear(this.emptyEl);
    const empty = !d || d.error || !d.runs.length;
    this.toolbar.hidden = this.stop.el.hidden = this.table.el.hidden = empty;
    if (empty) {
      this.emptyEl.append(
        d?.error
          ? emptyState('Could not load the runs.', String(d.error.message || d.error))
          : emptyState(
              'No run under this log folder has a verdict yet.',
              'The verdict needs the gradient statistics, on by default in bertwatch.watch(trainer).',
            ),
      );
      return;
    }
    this.renderStop(d);
    this.renderTable(d);
  }

  renderStop(d) {
    const c = this.stop;
    const unknown = d.stop_now.filter((s) => s.steps_left === null).length;
    c.sub.textContent = d.stop_now.length
      ? `The failing runs still training: stopping them now saves ${d.steps_saved} training steps` +
        (unknown ? ` and the unknown rest of ${unknown} (no max_steps logged)` : '') +
        '. A run that ended has nothing left to save.'
      : 'No failing run is still training.';
    clear(c.body);
    if (!d.stop_now.length) return;
    const list = h('ul', {class: 'runs-stop', id: 'runs-stop-list'});
    for (const s of d.stop_now) {
      const left = s.steps_left === null ? '? steps left' : `${s.steps_left} steps left`;
      list.append(h('li', {dataset: {run: s.run}}, h('b', {}, s.run), ` (${left})`));
    }
    c.body.append(list);
  }

  renderTable(d) {
    const rows = this.rows();
    const counts = LABELS.map((label) => [label, d.runs.filter((r) => r.label === label).length]);
    this.count.textContent =
      `${rows.length} of ${d.runs.length} runs · ` +
      counts
        .filter(([, n]) => n)
        .map(([label, n]) => `${n} ${label}`)
        .join(', ') +
      (d.without.length ? ` · ${d.without.length} without a verdict` : '');
    this.table.sub.textContent =
      'Ranked by the verdict: failing first, then at risk, then the rest; within a level, the weakest sign of ' +
      'learning first. * still training. History: one square a judged step, green healthy, grey cannot tell, ' +
      'orange at risk, red failing. Click a run to pick it in the Run menu.';
    const head = h('tr', {});
    for (const [key, title, value, dir] of COLUMNS) {
      const sorted = this.sort.key === key;
      const th = h(
        'th',
        {
          dataset: {key},
          class: value ? 'sortable' : '',
          'aria-sort': sorted ? (this.sort.dir < 0 ? 'descending' : 'ascending') : 'none',
        },
        title + (sorted ? (this.sort.dir < 0 ? ' ▼' : ' ▲') : ''),
      );
      if (value)
        th.addEventListener('click', () => {
          this.sort = {key, dir: sorted ? -this.sort.dir : dir};
          this.render();
        });
      head.append(th);
    }
    const body = h('tbody', {});
    const place = new Map(d.runs.map((r, i) => [r.run, i + 1]));
    for (const r of rows) body.append(this.row(r, place.get(r.run)));
    clear(this.table.body).append(
      h('div', {class: 'runs-scroll'}, h('table', {class: 'runs-table', id: 'runs-table'}, h('thead', {}, head), body)),
    );
  }

  row(r, place) {
    const name = h('button', {class: 'link', type: 'button', title: 'Open this run in the other views'}, r.run);
    name.addEventListener('click', () => this.app.setRun(r.run));
    const history = h('span', {class: 'runs-strip', 'aria-label': r.strip});
    for (const mark of r.strip) history.append(h('span', {class: `runs-mark ${MARKS[mark]}`}, mark));
    const step = r.max_steps ? `${r.step}/${r.max_steps}` : String(r.step);
    const reason = r.reasons[0] || '';
    return h(
      'tr',
      {dataset: {run: r.run, label: r.label}, class: r.run === this.app.run ? 'run-row current' : 'run-row'},
      h('td', {class: 'num'}, String(place)),
      h('td', {}, name),
      h(
        'td',
        {},
        h('span', {class: `verdict-badge small ${VERDICT_CLASS[r.label]}`}, r.label),
        r.ended
          ? ''
          : h(
              'span',
              {class: 'runs-live', title: 'The Trainer has not logged its end: still training, or killed'},
              ' *',
            ),
      ),
      h('td', {class: 'num'}, step),
      h('td', {}, history),
      h('td', {class: 'num'}, r.learning_rate === null ? '-' : fmt(r.learning_rate, 2)),
      h('td', {class: 'num'}, r.seed === null ? '-' : String(r.seed)),
      h('td', {class: 'reason', title: r.reasons.join('\n')}, reason),
    );
  }
}

// bertwatch TensorBoard plugin: entry module. TensorBoard loads it in an iframe and calls render() once.
// Plain ES modules, relative URLs only; no string is ever parsed as HTML.
// Every module is served flat at ./static/<file>, whether it lives in tb/static/ (the shared modules) or in its view's
// folder tb/views/<view>/ (plugin.py's FRONTEND_HOMES), so modules import one another as './<file>'.

import {getJSON, loadStatNames} from './static/api.js';
import {clear, emptyState, h, hideTooltip, setOptions} from './static/dom.js';
import {startLive} from './static/live.js';
import {AblationView} from './static/view_ablation.js';
import {AttentionView} from './static/view_attention.js';
import {ClustersView} from './static/view_clusters.js';
import {CompareView} from './static/view_compare.js';
import {DriftView} from './static/view_drift.js';
import {HeadsView} from './static/view_heads.js';
import {RunsView} from './static/view_runs.js';

function loadStylesheet() {
  return new Promise((resolve) => {
    const link = h('link', {rel: 'stylesheet', href: './static/style.css'});
    link.addEventListener('load', resolve);
    link.addEventListener('error', resolve);
    document.head.append(link);
    setTimeout(resolve, 1500);
  });
}

function runsOf(tags) {
  return Object.keys(tags.runs || {}).sort();
}

/** Default run: the one with the most head-grid tags, then the most recent data. */
function defaultRun(tags) {
  let best = null;
  let bestKey = null;
  for (const run of runsOf(tags)) {
    const infos = Object.values(tags.runs[run]);
    const grids = infos.filter((i) => i.kind === 'head_grid').length;
    const latest = Math.max(0, ...infos.map((i) => i.maxWallTime || 0));
    const key = [grids, latest];
    if (!bestKey || key[0] > bestKey[0] || (key[0] === bestKey[0] && key[1] > bestKey[1])) {
      best = run;
      bestKey = key;
    }
  }
  return best;
}

export async function render() {
  const t0 = performance.now();
  performance.mark('bw-render-start');
  const debug = {timings: {renderStart: t0}, live: null, app: null};
  window.__bertwatch = debug;
  document.documentElement.lang = 'en';
  await loadStylesheet();

  const runSelect = h('select', {id: 'run-select', class: 'select', 'aria-label': 'Run'});
  const status = h(
    'div',
    {id: 'live-status', class: 'live-status', dataset: {state: 'starting'}},
    h('span', {class: 'dot'}),
    h('span', {class: 'text'}, 'Connecting…'),
  );
  const tabs = h('nav', {class: 'tabs', role: 'tablist'});
  const main = h('main', {class: 'main'});
  const skipped = h('div', {class: 'notice', hidden: true});
  const shell = h(
    'div',
    {class: 'app'},
    h(
      'header',
      {class: 'topbar'},
      h(
        'div',
        {class: 'brand'},
        h('span', {class: 'logo'}, 'bertwatch'),
        h('span', {class: 'tagline'}, 'attention heads'),
      ),
      tabs,
      h(
        'div',
        {class: 'topbar-right'},
        h('label', {class: 'field inline'}, h('span', {class: 'field-label'}, 'Run'), runSelect),
        status,
      ),
    ),
    skipped,
    main,
  );
  document.body.append(shell);

  const app = {
    tags: {runs: {}},
    run: null,
    runSelect,
    setRun(run) {
      if (run && run !== app.run && app.tags.runs?.[run]) {
        app.run = run;
        runSelect.value = run;
        app.activeView?.update('run');
        updateTabs();
      }
    },
    timings: debug.timings,
  };
  debug.app = app;

  const views = [HeadsView, DriftView, AttentionView, AblationView, CompareView, ClustersView, RunsView].map(
    (V) => new V(app),
  );
  const tabButtons = new Map();
  for (const view of views) {
    const button = h(
      'button',
      {class: 'tab', role: 'tab', type: 'button', dataset: {view: view.id}, onclick: () => activate(view)},
      view.label,
    );
    tabButtons.set(view.id, button);
    tabs.append(button);
    view.el.hidden = true;
    main.append(view.el);
  }

  function updateTabs() {
    for (const view of views) {
      const button = tabButtons.get(view.id);
      const anyData = runsOf(app.tags).some((run) => view.hasData(app.tags, run));
      button.hidden = view.optional ? !anyData : false;
      button.classList.toggle('no-data', !view.hasData(app.tags, app.run));
      button.classList.toggle('active', app.activeView === view);
      button.setAttribute('aria-selected', String(app.activeView === view));
    }
  }

  async function activate(view) {
    if (app.activeView === view) return;
    hideTooltip();
    if (app.activeView) app.activeView.hide();
    app.activeView = view;
    for (const v of views) v.el.hidden = v !== view;
    updateTabs();
    await view.update('show');
  }

  function applyTags(tags) {
    app.tags = tags;
    const runs = runsOf(tags);
    const chosen = runs.includes(app.run) ? app.run : defaultRun(tags);
    setOptions(runSelect, runs, chosen);
    app.run = runSelect.value || null;
    const n = (tags.skipped || []).length;
    skipped.hidden = n === 0;
    clear(skipped).append(`${n} tag${n === 1 ? '' : 's'} skipped (written by a newer bertwatch, or unreadable).`);
    updateTabs();
  }

  runSelect.addEventListener('change', () => {
    app.run = runSelect.value;
    updateTabs();
    if (app.activeView) app.activeView.update('run');
  });

  let tags;
  try {
    [tags] = await Promise.all([getJSON('tags'), loadStatNames()]);
  } catch (error) {
    main.append(emptyState('Could not load bertwatch data.', String(error.message || error)));
    return;
  }
  debug.timings.tagsLoaded = performance.now();
  applyTags(tags);
  if (!app.run) {
    main.append(
      emptyState(
        'No bertwatch data yet.',
        'Add bertwatch.BertWatchCallback to your Trainer; this page updates by itself.',
      ),
    );
  }
  const first = views.find((v) => v.hasData(app.tags, app.run)) || views[0];
  await activate(first);

  const setStatus = ({state, at, error}) => {
    status.dataset.state = state;
    const text = status.querySelector('.text');
    const time = at ? at.toLocaleTimeString() : '';
    if (state === 'live') text.textContent = `Live · ${time}`;
    else if (state === 'paused') text.textContent = 'Paused (tab hidden)';
    else text.textContent = `Offline · ${error ? error.message || error : ''}`.slice(0, 80);
    status.title = state === 'live' ? 'Polling for new steps every 3 s' : text.textContent;
  };
  setStatus({state: 'live', at: new Date()});
  debug.live = startLive({
    initialTags: tags,
    onStatus: setStatus,
    onTags: async (newTags, changed) => {
      if (!changed) return;
      const hadRun = !!app.run;
      applyTags(newTags);
      if (!hadRun && app.run) {
        const view = views.find((v) => v.hasData(app.tags, app.run)) || views[0];
        clear(main);
        for (const v of views) main.append(v.el);
        app.activeView = null;
        await activate(view);
      } else if (app.activeView) {
        await app.activeView.update('data');
      }
    },
  });
}

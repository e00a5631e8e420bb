// Attention maps of the probe examples: one head's token x token map (queries = rows, keys = columns) with
// the tokens on both axes, highlighted on hover, and small multiples of every head of the layer. A measure selector
// switches between the weights and the contribution measures logged for the same example (norms, ALTI, rollout,
// value zeroing); per-layer measures show the layer's one map with the head picker off.
// Tokens are user data: they only ever become textContent.

import {getJSON, nums, rawText, tagsOfKind} from './api.js';
import {card, clear, emptyState, field, fmt, fmtStep, h, setOptions} from './dom.js';
import {legend, sequential} from './scales.js';

// Float16 maps: each value is off by at most 2^-11 of itself, so a row summing to one sums to 1 ± 5e-4.
const ROW_SUM_TOLERANCE = 2e-3;

function drawMap(canvas, map, scale, cssSize) {
  const T = map.length;
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(cssSize * dpr);
  canvas.height = Math.round(cssSize * dpr);
  canvas.style.width = `${cssSize}px`;
  canvas.style.height = `${cssSize}px`;
  const src = document.createElement('canvas');
  src.width = T;
  src.height = T;
  const sctx = src.getContext('2d');
  const img = sctx.createImageData(T, T);
  for (let i = 0; i < T; i++) {
    for (let j = 0; j < T; j++) {
      const rgb = scale.rgb(map[i][j]) || [212, 212, 212];
      const o = 4 * (i * T + j);
      img.data[o] = rgb[0];
      img.data[o + 1] = rgb[1];
      img.data[o + 2] = rgb[2];
      img.data[o + 3] = 255;
    }
  }
  sctx.putImageData(img, 0, 0);
  const ctx = canvas.getContext('2d');
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(src, 0, 0, canvas.width, canvas.height);
}

export class AttentionView {
  constructor(app) {
    this.app = app;
    this.id = 'attention';
    this.label = 'Attention maps';
    this.exampleSelect = h('select', {id: 'example-select', class: 'select', 'aria-label': 'Probe example'});
    this.stepSelect = h('select', {id: 'attn-step-select', class: 'select', 'aria-label': 'Step'});
    this.layerSelect = h('select', {id: 'layer-select', class: 'select', 'aria-label': 'Layer'});
    this.headSelect = h('select', {id: 'head-select', class: 'select', 'aria-label': 'Head'});
    this.measureSelect = h('select', {id: 'measure-select', class: 'select', 'aria-label': 'Measure'});
    this.exampleSelect.addEventListener('change', () => {
      this.data = null;
      this.update('example');
    });
    this.measureSelect.addEventListener('change', () => this.update('measure'));
    this.stepSelect.addEventListener('change', () => this.load());
    this.layerSelect.addEventListener('change', () => this.load());
    this.headSelect.addEventListener('change', () => this.renderAll());
    this.toolbar = h(
      'div',
      {class: 'toolbar'},
      field('Example', this.exampleSelect),
      field('Measure', this.measureSelect),
      field('Step', this.stepSelect),
      field('Layer', this.layerSelect),
      field('Head', this.headSelect),
    );
    this.mapCard = card('Attention', {class: 'map-card'});
    this.multiCard = card('All heads', {class: 'multi-card'});
    this.content = h('div', {class: 'layout-attention'}, this.mapCard.el, this.multiCard.el);
    this.emptyEl = h('div', {});
    this.measureNote = h('div', {class: 'measure-note', id: 'measure-note', hidden: true});
    this.el = h(
      'div',
      {class: 'view view-attention', id: 'view-attention'},
      this.toolbar,
      this.measureNote,
      this.emptyEl,
      this.content,
    );
    this.tokensSeen = new Map(); // example index -> tokens of its weights, to flag a measure logged on other tokens
    this.seq = 0;
  }

  hasData(tags, run) {
    return tagsOfKind(tags, run, 'attention_map').length > 0;
  }

  hide() {}

  async update(reason) {
    const run = this.app.run;
    const tags = tagsOfKind(this.app.tags, run, 'attention_map').sort((a, b) => (a.tag < b.tag ? -1 : 1));
    clear(this.emptyEl);
    this.content.hidden = this.toolbar.hidden = tags.length === 0;
    if (!tags.length) {
      this.emptyEl.append(
        emptyState(
          'No attention maps in this run.',
          'The callback logs the maps of its probe examples as bertwatch/attention/<i>.',
        ),
      );
      return;
    }
    const indices = [...new Set(tags.map((t) => t.index).filter((i) => Number.isInteger(i)))].sort((a, b) => a - b);
    setOptions(
      this.exampleSelect,
      indices.map((i) => ({value: String(i), text: `Example ${i}`})),
    );
    const index = this.exampleSelect.value;
    const seq = ++this.seq;
    const listing = await getJSON('attention_measures', {run, index});
    if (seq !== this.seq) return;
    this.measures = listing.measures;
    const previous = this.measureSelect.value || 'weights';
    setOptions(
      this.measureSelect,
      listing.measures.map((m) => ({value: m.measure, text: m.label, title: m.description})),
      previous,
    );
    this.measureSelect.disabled = listing.measures.length < 2;
    const measure = this.currentMeasure();
    const steps = measure.steps;
    const pinned = this.stepSelect.value;
    let follow = pinned === '' || reason === 'run' || reason === 'example';
    this.stepNote = null;
    if (!follow && reason === 'measure' && !steps.includes(Number(pinned))) {
      this.stepNote = `${measure.label} was not logged at step ${fmtStep(Number(pinned))}: showing its latest step.`;
      follow = true;
    }
    const options = [{value: '', text: `Latest (${fmtStep(steps[steps.length - 1])})`}].concat(
      steps
        .slice()
        .reverse()
        .map((st) => ({value: String(st), text: fmtStep(st)})),
    );
    setOptions(this.stepSelect, options, follow ? '' : pinned);
    if (reason === 'data' && this.data && follow === false) return; // pinned step: nothing new to show
    await this.load();
  }

  currentMeasure() {
    return this.measures.find((m) => m.measure === this.measureSelect.value) || this.measures[0];
  }

  async load() {
    const run = this.app.run;
    const measure = this.currentMeasure();
    const tag = measure.tag;
    const step = this.stepSelect.value;
    const layer = this.layerSelect.value || 0;
    const seq = ++this.seq;
    let data;
    try {
      data = await getJSON('attention', {run, tag, step, layer});
    } catch (e) {
      if (seq !== this.seq) return;
      if (e.status === 400)
        data = await getJSON('attention', {
          run,
          tag,
          step,
          layer,
          head: measure.unit === 'layer' ? 0 : this.headSelect.value || 0,
        });
      else throw e;
    }
    if (seq !== this.seq) return;
    this.data = data;
    data.info = measure;
    const L = data.layers;
    setOptions(
      this.layerSelect,
      Array.from({length: L}, (_, l) => ({value: String(l), text: `L${l}`})),
      String(data.layer),
    );
    const perLayer = data.unit === 'layer';
    if (!perLayer) {
      const old = this.headOptions === data.heads ? this.headSelect.value : undefined;
      setOptions(
        this.headSelect,
        Array.from({length: data.heads}, (_, k) => ({value: String(k), text: `H${k}`})),
        old,
      );
      this.headOptions = data.heads;
    }
    this.headSelect.disabled = perLayer;
    this.headSelect.title = perLayer ? `${measure.label} is a measure of the whole layer: no heads` : '';
    if (data.measure === 'weights') this.tokensSeen.set(data.index, data.tokens);
    this.renderNote(data);
    this.renderAll();
  }

  /** What the selected measure answers, whether it is per layer, and whatever differs from the weights' view. */
  renderNote(data) {
    const info = data.info;
    const seen = this.tokensSeen.get(data.index);
    const tokensDiffer = seen && data.measure !== 'weights' && seen.join('\u0000') !== data.tokens.join('\u0000');
    const note = clear(this.measureNote);
    note.hidden = false;
    note.dataset.measure = data.measure;
    note.dataset.unit = data.unit;
    note.append(h('b', {}, info.label), ': ', info.description);
    if (data.unit === 'layer')
      note.append(
        h(
          'div',
          {class: 'measure-layer', id: 'measure-layer-note'},
          'One map for the whole layer (all heads together): the head picker is off.',
        ),
      );
    if (this.stepNote) note.append(h('div', {class: 'measure-warn', id: 'measure-step-note'}, this.stepNote));
    if (tokensDiffer)
      note.append(
        h(
          'div',
          {class: 'measure-warn', id: 'measure-token-note'},
          `${info.label} was logged on other tokens than the weights of this example: its labels are its own.`,
        ),
      );
  }

  renderAll() {
    const data = this.data;
    if (!data) return;
    const perHead = data.head === null || data.head === undefined;
    const head = data.unit === 'layer' ? 0 : perHead ? Number(this.headSelect.value || 0) : data.head;
    const maps = perHead ? nums(data.maps) : null;
    const map = perHead ? maps[head] : nums(data.maps);
    const rawMap = perHead ? data.maps[head] : data.maps;
    let max = 0;
    let min = 0;
    for (const m of maps || [map])
      for (const row of m)
        for (const v of row) {
          if (Number.isFinite(v) && v > max) max = v;
          if (Number.isFinite(v) && v < min) min = v;
        }
    const scale = sequential(min, max > min ? max : min + 1);
    this.renderMap(data, head, map, rawMap, scale);
    if (data.unit === 'layer') this.renderLayerNote(data);
    else this.renderMultiples(data, maps, head, scale);
  }

  renderLayerNote(data) {
    const c = this.multiCard;
    c.title.textContent = `${data.info.label} of L${data.layer}`;
    c.sub.textContent = 'a measure of the whole layer';
    clear(c.body).append(
      emptyState(
        'No per-head maps for this measure.',
        `${data.info.label} gives one map per layer. Switch the measure to Weights or Norms to compare the heads.`,
      ),
    );
  }

  renderMap(data, head, map, rawMap, scale) {
    const T = data.length;
    const cell = Math.max(8, Math.min(26, Math.floor(520 / Math.max(1, T))));
    const size = cell * T;
    const fontSize = Math.max(8, Math.min(13, cell - 2));
    const canvas = h('canvas', {id: 'attn-canvas', class: 'attn-canvas'});
    drawMap(canvas, map, scale, size);
    const segClass = (i) => (data.segments?.[i] ? ' seg-b' : '');
    const rowToks = data.tokens.map((t, i) =>
      h(
        'div',
        {
          class: `tok row${segClass(i)}`,
          style: {height: `${cell}px`, lineHeight: `${cell}px`, fontSize: `${fontSize}px`},
          dataset: {index: String(i)},
          title: t,
        },
        t,
      ),
    );
    const colToks = data.tokens.map((t, j) =>
      h(
        'div',
        {
          class: `tok col${segClass(j)}`,
          style: {width: `${cell}px`, fontSize: `${fontSize}px`},
          dataset: {index: String(j)},
          title: t,
        },
        t,
      ),
    );
    const crossRow = h('div', {
      class: 'cross cross-row',
      hidden: true,
      style: {height: `${cell}px`, width: `${size}px`},
    });
    const crossCol = h('div', {
      class: 'cross cross-col',
      hidden: true,
      style: {width: `${cell}px`, height: `${size}px`},
    });
    const readout = h(
      'div',
      {id: 'attn-readout', class: 'readout'},
      'Hover the map: rows are queries, columns are keys.',
    );
    const plot = h(
      'div',
      {class: 'attn-plot', style: {width: `${size}px`, height: `${size}px`}},
      canvas,
      crossRow,
      crossCol,
    );
    const mapEl = h(
      'div',
      {class: 'attn-map', style: {gridTemplateColumns: `auto ${size}px`}},
      h('div', {class: 'attn-corner'}, h('span', {}, 'query ↓ / key →')),
      h('div', {class: 'attn-cols'}, ...colToks),
      h('div', {class: 'attn-rows'}, ...rowToks),
      plot,
    );
    let hl = [];
    const highlight = (i, j) => {
      for (const el of hl) el.classList.remove('hl');
      hl = [];
      if (i !== null) {
        rowToks[i].classList.add('hl');
        hl.push(rowToks[i]);
        crossRow.hidden = false;
        crossRow.style.top = `${i * cell}px`;
      } else crossRow.hidden = true;
      if (j !== null) {
        colToks[j].classList.add('hl');
        hl.push(colToks[j]);
        crossCol.hidden = false;
        crossCol.style.left = `${j * cell}px`;
      } else crossCol.hidden = true;
    };
    const profile = h('div', {class: 'row-profile', id: 'attn-row-profile'});
    const showProfile = (i) => {
      const order = map[i]
        .map((v, j) => [v, j])
        .filter(([v]) => Number.isFinite(v))
        .sort((a, b) => b[0] - a[0])
        .slice(0, 6);
      clear(profile).append(
        h(
          'div',
          {class: 'legend-title'},
          'Strongest keys of query ',
          h('span', {class: `tok-inline${segClass(i)}`}, data.tokens[i]),
        ),
        ...order.map(([v, j]) =>
          h(
            'div',
            {class: 'profile-row'},
            h('span', {class: `tok-inline key${segClass(j)}`}, data.tokens[j]),
            h(
              'span',
              {class: 'profile-bar'},
              h('span', {
                class: 'fill',
                style: {width: `${Math.max(0, Math.min(1, v / scale.domain[1])) * 100}%`, background: scale.color(v)},
              }),
            ),
            h('span', {class: 'profile-val'}, fmt(v, 3)),
          ),
        ),
      );
    };
    const show = (i, j) => {
      highlight(i, j);
      clear(readout);
      readout.dataset.query = String(i);
      readout.dataset.key = String(j);
      readout.dataset.value = rawText(rawMap[i][j]);
      readout.append(
        h('span', {class: 'q'}, data.tokens[i]),
        h('span', {class: 'arrow'}, ' → '),
        h('span', {class: 'k'}, data.tokens[j]),
        h('span', {class: 'val'}, fmt(map[i][j], 4)),
      );
      if (profile.dataset.query !== String(i)) {
        profile.dataset.query = String(i);
        showProfile(i);
      }
    };
    showProfile(0);
    profile.dataset.query = '0';
    plot.addEventListener('mousemove', (e) => {
      const r = canvas.getBoundingClientRect();
      const j = Math.floor(((e.clientX - r.left) / r.width) * T);
      const i = Math.floor(((e.clientY - r.top) / r.height) * T);
      if (i >= 0 && i < T && j >= 0 && j < T) show(i, j);
    });
    plot.addEventListener('mouseleave', () => highlight(null, null));
    rowToks.forEach((el, i) => {
      el.addEventListener('mouseenter', () => {
        let best = 0;
        map[i].forEach((v, j) => {
          if (v > map[i][best]) best = j;
        });
        show(i, best);
      });
    });
    colToks.forEach((el, j) => {
      el.addEventListener('mouseenter', () => highlight(null, j));
    });
    const c = this.mapCard;
    const weights = data.measure === 'weights';
    c.title.textContent =
      data.unit === 'layer'
        ? `${data.info.label} · L${data.layer} (whole layer)`
        : `${weights ? 'Attention' : data.info.label} · L${data.layer} H${head}`;
    c.sub.textContent = `example ${data.index !== undefined && data.index !== null ? data.index : ''} · ${T} tokens · step ${fmtStep(data.step)}`;
    const defined = map.filter((row) => row.every(Number.isFinite));
    const stochastic = defined.every((row) => Math.abs(row.reduce((a, v) => a + v, 0) - 1) < ROW_SUM_TOLERANCE);
    const undefinedRows = T - defined.length;
    clear(c.aside).append(
      h(
        'span',
        {
          class: 'pill',
          id: 'row-sum-pill',
          dataset: {stochastic: String(stochastic), undefinedRows: String(undefinedRows)},
          title: undefinedRows ? 'grey rows have no value (e.g. value zeroing where nothing changed)' : '',
        },
        (stochastic ? 'rows sum to 1' : 'rows do not sum to 1') +
          (undefinedRows ? ` · ${undefinedRows} row${undefinedRows === 1 ? '' : 's'} undefined` : ''),
      ),
    );
    const side = h(
      'div',
      {class: 'attn-side'},
      readout,
      profile,
      legend(scale, {title: weights ? 'attention probability' : data.info.label, width: 200}),
      data.segments?.some((x) => x)
        ? h(
            'div',
            {class: 'seg-note'},
            h('span', {class: 'tok-inline seg-b'}, 'blue'),
            ' tokens are in the second segment',
          )
        : null,
    );
    clear(c.body).append(h('div', {class: 'attn-body'}, h('div', {class: 'attn-scroll'}, mapEl), side));
  }

  renderMultiples(data, maps, head, scale) {
    const c = this.multiCard;
    c.title.textContent = `All heads of L${data.layer}`;
    c.sub.textContent = 'click a head to enlarge it; shared colour scale';
    clear(c.body);
    if (!maps) {
      c.body.append(
        emptyState('Too long for small multiples.', 'This example is too long to send every head at once.'),
      );
      return;
    }
    const H = maps.length;
    const size = H > 12 ? 78 : 96;
    const grid = h('div', {
      class: 'multiples',
      id: 'attn-multiples',
      style: {gridTemplateColumns: `repeat(${H > 12 ? 4 : 3}, ${size}px)`},
    });
    maps.forEach((m, k) => {
      const canvas = h('canvas', {class: 'mini-canvas'});
      drawMap(canvas, m, scale, size);
      const tile = h(
        'button',
        {
          type: 'button',
          class: `mini${k === head ? ' selected' : ''}`,
          dataset: {head: String(k)},
          title: `L${data.layer} H${k}`,
        },
        canvas,
        h('span', {class: 'mini-label'}, `H${k}`),
      );
      tile.addEventListener('click', () => {
        this.headSelect.value = String(k);
        this.renderAll();
      });
      grid.append(tile);
    });
    c.body.append(grid);
  }
}

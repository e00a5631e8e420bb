// Attention maps of the probe examples: one head's token x token map (queries = rows, keys = columns) with
// the tokens on both axes, highlighted on hover, and small multiples of every head of the layer.
// Tokens are user data: they only ever become textContent.

import {getJSON, nums, rawText, tagsOfKind} from './api.js';
import {card, clear, emptyState, field, fmt, fmtStep, h, setOptions} from './dom.js';
import {legend, sequential} from './scales.js';

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
    this.exampleSelect.addEventListener('change', () => {
      this.data = null;
      this.update('example');
    });
    this.stepSelect.addEventListener('change', () => this.load());
    this.layerSelect.addEventListener('change', () => this.load());
    this.headSelect.addEventListener('change', () => this.renderAll());
    this.toolbar = h(
      'div',
      {class: 'toolbar'},
      field('Example', this.exampleSelect),
      field('Step', this.stepSelect),
      field('Layer', this.layerSelect),
      field('Head', this.headSelect),
    );
    this.mapCard = card('Attention', {class: 'map-card'});
    this.multiCard = card('All heads', {class: 'multi-card'});
    this.content = h('div', {class: 'layout-attention'}, this.mapCard.el, this.multiCard.el);
    this.emptyEl = h('div', {});
    this.el = h('div', {class: 'view view-attention', id: 'view-attention'}, this.toolbar, this.emptyEl, this.content);
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
    setOptions(
      this.exampleSelect,
      tags.map((t) => ({value: t.tag, text: `Example ${t.index !== undefined ? t.index : t.tag}`})),
    );
    const tag = this.exampleSelect.value;
    const steps = await getJSON('steps', {run, tag});
    const follow = this.stepSelect.value === '' || reason === 'run' || reason === 'example';
    const options = [{value: '', text: `Latest (${fmtStep(steps.steps[steps.steps.length - 1])})`}].concat(
      steps.steps
        .slice()
        .reverse()
        .map((st) => ({value: String(st), text: fmtStep(st)})),
    );
    setOptions(this.stepSelect, options, follow ? '' : this.stepSelect.value);
    if (reason === 'data' && this.data && follow === false) return; // pinned step: nothing new to show
    await this.load();
  }

  async load() {
    const run = this.app.run;
    const tag = this.exampleSelect.value;
    const step = this.stepSelect.value;
    const layer = this.layerSelect.value || 0;
    const seq = ++this.seq;
    let data;
    try {
      data = await getJSON('attention', {run, tag, step, layer});
    } catch (e) {
      if (seq !== this.seq) return;
      if (e.status === 400)
        data = await getJSON('attention', {run, tag, step, layer, head: this.headSelect.value || 0});
      else throw e;
    }
    if (seq !== this.seq) return;
    this.data = data;
    const L = data.layers;
    const H = data.heads;
    setOptions(
      this.layerSelect,
      Array.from({length: L}, (_, l) => ({value: String(l), text: `L${l}`})),
      String(data.layer),
    );
    setOptions(
      this.headSelect,
      Array.from({length: H}, (_, k) => ({value: String(k), text: `H${k}`})),
    );
    this.renderAll();
  }

  renderAll() {
    const data = this.data;
    if (!data) return;
    const perHead = data.head === null || data.head === undefined;
    const head = perHead ? Number(this.headSelect.value || 0) : data.head;
    const maps = perHead ? nums(data.maps) : null;
    const map = perHead ? maps[head] : nums(data.maps);
    const rawMap = perHead ? data.maps[head] : data.maps;
    let max = 0;
    for (const m of maps || [map]) for (const row of m) for (const v of row) if (Number.isFinite(v) && v > max) max = v;
    const scale = sequential(0, max > 0 ? max : 1);
    this.renderMap(data, head, map, rawMap, scale);
    this.renderMultiples(data, maps, head, scale);
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
                style: {width: `${Math.max(0, Math.min(1, v)) * 100}%`, background: scale.color(v)},
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
    c.title.textContent = `Attention · L${data.layer} H${head}`;
    c.sub.textContent = `example ${data.index !== undefined && data.index !== null ? data.index : ''} · ${T} tokens · step ${fmtStep(data.step)}`;
    clear(c.aside).append(h('span', {class: 'pill'}, `row sums to 1`));
    const side = h(
      'div',
      {class: 'attn-side'},
      readout,
      profile,
      legend(scale, {title: 'attention probability', width: 200}),
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

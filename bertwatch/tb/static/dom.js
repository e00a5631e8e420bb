// DOM helpers. User strings (tokens, run and tag names) only ever become text nodes, attributes or
// `new Option(text, value)`: nothing here ever parses a string as HTML.

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function applyAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.setAttribute('class', value);
    else if (key === 'text') el.textContent = String(value);
    else if (key === 'style' && typeof value === 'object') Object.assign(el.style, value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key in el && !(el instanceof SVGElement) && typeof value !== 'string') el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  return el;
}

/** h('div', {class: 'x', onclick: f}, 'text', child, ...) */
export function h(tag, attrs, ...children) {
  return append(applyAttrs(document.createElement(tag), attrs), children);
}

/** Same for SVG elements. */
export function s(tag, attrs, ...children) {
  return append(applyAttrs(document.createElementNS(SVG_NS, tag), attrs), children);
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** Replace the <option>s of a <select>; items are strings or {value, text, group}. Keeps the value if still present. */
export function setOptions(select, items, preferred) {
  const previous = preferred !== undefined ? preferred : select.value;
  clear(select);
  const groups = new Map();
  for (const item of items) {
    const it = typeof item === 'string' ? {value: item, text: item} : item;
    const option = new Option(it.text, it.value);
    if (it.title) option.title = it.title;
    if (it.group) {
      if (!groups.has(it.group)) {
        const og = document.createElement('optgroup');
        og.label = it.group;
        groups.set(it.group, og);
        select.append(og);
      }
      groups.get(it.group).append(option);
    } else {
      select.append(option);
    }
  }
  const values = items.map((it) => (typeof it === 'string' ? it : it.value));
  if (values.includes(previous)) select.value = previous;
  else if (values.length) select.value = values[0];
  return select.value;
}

/** Numbers for people: NaN and infinities as "NaN", "∞", "−∞". */
export function fmt(v, digits = 4) {
  if (v === null || v === undefined) return '—';
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '∞';
  if (v === -Infinity) return '−∞';
  if (v === 0) return '0';
  const a = Math.abs(v);
  let text;
  if (a >= 1e5 || a < 1e-3) text = v.toExponential(Math.max(1, digits - 2));
  else text = v.toFixed(Math.max(0, digits - 1 - Math.floor(Math.log10(a))));
  if (text.includes('.') && !text.includes('e')) text = text.replace(/0+$/, '').replace(/\.$/, '');
  return text.replace('-', '−');
}

export function fmtSigned(v, digits = 3) {
  const t = fmt(v, digits);
  return Number.isFinite(v) && v > 0 ? `+${t}` : t;
}

export function fmtStep(step) {
  return Number(step).toLocaleString('en-US');
}

export function fmtTime(seconds) {
  if (!Number.isFinite(seconds)) return '';
  return new Date(seconds * 1000).toLocaleString();
}

export function headName(layer, head) {
  return head === null || head === undefined ? `L${layer}` : `L${layer} H${head}`;
}

// --- one shared tooltip --------------------------------------------------------------------------

let tooltipEl = null;

function tooltip() {
  if (!tooltipEl) {
    tooltipEl = h('div', {class: 'bw-tooltip', role: 'tooltip'});
    document.body.append(tooltipEl);
  }
  return tooltipEl;
}

/** Show `lines` (array of strings or [label, value] pairs) near the mouse event. */
export function showTooltip(event, lines) {
  const el = clear(tooltip());
  for (const line of lines) {
    if (Array.isArray(line))
      el.append(h('div', {class: 'row'}, h('span', {class: 'k'}, line[0]), h('span', {class: 'v'}, line[1])));
    else el.append(h('div', {class: 'title'}, line));
  }
  el.style.display = 'block';
  const pad = 14;
  const {innerWidth: W, innerHeight: H} = window;
  const r = el.getBoundingClientRect();
  let x = event.clientX + pad;
  let y = event.clientY + pad;
  if (x + r.width > W - 4) x = event.clientX - r.width - pad;
  if (y + r.height > H - 4) y = event.clientY - r.height - pad;
  el.style.left = `${Math.max(4, x)}px`;
  el.style.top = `${Math.max(4, y)}px`;
}

export function hideTooltip() {
  if (tooltipEl) tooltipEl.style.display = 'none';
}

/** A titled card. Returns {el, body, title, aside}. */
export function card(titleText, opts = {}) {
  const title = h('h2', {class: 'card-title'}, titleText);
  const aside = h('div', {class: 'card-aside'});
  const sub = h('div', {class: 'card-sub'});
  const body = h('div', {class: 'card-body'});
  const el = h(
    'section',
    {class: `card ${opts.class || ''}`},
    h('header', {class: 'card-head'}, h('div', {}, title, sub), aside),
    body,
  );
  return {el, body, title, sub, aside};
}

export function emptyState(text, hint) {
  return h(
    'div',
    {class: 'empty'},
    h('div', {class: 'empty-title'}, text),
    hint ? h('div', {class: 'empty-hint'}, hint) : null,
  );
}

export function field(labelText, control) {
  return h('label', {class: 'field'}, h('span', {class: 'field-label'}, labelText), control);
}

/**
 * A step slider with a label and a "follow latest" toggle. onChange(index, follow) on every move.
 */
export function stepper({prefix = '', onChange}) {
  const slider = h('input', {
    type: 'range',
    id: `${prefix}step-slider`,
    class: 'slider',
    min: 0,
    max: 0,
    step: 1,
    value: 0,
    'aria-label': 'Step',
  });
  const label = h('span', {id: `${prefix}step-label`, class: 'step-label'}, '—');
  const follow = h('input', {type: 'checkbox', id: `${prefix}follow-latest`, checked: true});
  const el = h(
    'div',
    {class: 'stepper'},
    h('span', {class: 'field-label'}, 'Step'),
    slider,
    label,
    h(
      'label',
      {class: 'check', title: 'Jump to each new step as it is logged'},
      follow,
      h('span', {}, 'Follow latest'),
    ),
  );
  let steps = [];
  const setLabel = (i) => {
    label.textContent = steps.length ? `${fmtStep(steps[i])}` : '—';
    label.title = steps.length ? `${i + 1} of ${steps.length} logged steps` : '';
    el.dataset.step = steps.length ? String(steps[i]) : '';
  };
  slider.addEventListener('input', () => {
    const i = Number(slider.value);
    follow.checked = i === steps.length - 1;
    setLabel(i);
    onChange(i, follow.checked);
  });
  follow.addEventListener('change', () => {
    if (follow.checked && steps.length) {
      slider.value = String(steps.length - 1);
      setLabel(steps.length - 1);
      onChange(steps.length - 1, true);
    }
  });
  return {
    el,
    get index() {
      return Number(slider.value);
    },
    get follow() {
      return follow.checked;
    },
    get step() {
      return steps.length ? steps[Number(slider.value)] : null;
    },
    set(newSteps, index) {
      steps = newSteps;
      slider.max = String(Math.max(0, steps.length - 1));
      slider.disabled = steps.length <= 1;
      slider.value = String(index);
      setLabel(index);
    },
  };
}

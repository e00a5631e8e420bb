// A [layers x heads] heatmap made of DOM cells (<= a few hundred), each carrying its exact value in
// data-value (the number as the JSON route sent it), with hover tooltips, selection and per-cell marks.

import {fmt, h, headName, hideTooltip, showTooltip} from './dom.js';
import {textOn} from './scales.js';

/**
 * @param {object} o
 * @param {number[][]} o.values  [layers][heads], numbers (NaN / ±Infinity allowed)
 * @param {object} o.scale       from scales.js
 * @param {function} [o.tooltip] (layer, head, value) => lines for showTooltip
 * @param {function} [o.onClick] (layer, head)
 * @param {string[][]} [o.marks] short glyphs drawn in the cells' corners
 * @param {boolean[][]} [o.flags] cells to mark as significant (a dot)
 * @param {number[]} [o.selected] [layer, head]
 * @param {boolean} [o.showValues] print the value in each cell
 * @param {number} [o.cell] cell width in px
 * @param {string} [o.id] element id
 */
export function heatmap(o) {
  hideTooltip(); // the cell under the mouse may be replaced
  const values = o.values;
  const L = values.length;
  const H = L ? values[0].length : 0;
  const cw = o.cell || (H > 16 ? 26 : 36);
  const ch = Math.round(cw * (o.showValues ? 0.72 : 0.66));
  const grid = h('div', {
    class: 'hm-grid',
    style: {gridTemplateColumns: `2.6em repeat(${H}, ${cw}px)`, gridAutoRows: `${ch}px`},
  });
  grid.append(h('div', {class: 'hm-corner'}));
  for (let j = 0; j < H; j++) grid.append(h('div', {class: 'hm-col'}, String(j)));
  const cells = [];
  for (let i = 0; i < L; i++) {
    grid.append(h('div', {class: 'hm-row'}, `L${i}`));
    const row = [];
    for (let j = 0; j < H; j++) {
      const v = values[i][j];
      const rgb = o.scale.rgb(v);
      const cell = h('div', {
        class: `cell${Number.isNaN(v) ? ' nan' : ''}${Number.isFinite(v) || Number.isNaN(v) ? '' : ' inf'}`,
        dataset: {layer: String(i), head: String(j), value: o.raw ? o.raw[i][j] : String(v)},
        style: {background: o.scale.color(v), color: textOn(rgb)},
      });
      if (!Number.isFinite(v)) cell.append(h('span', {class: 'cell-text'}, fmt(v)));
      else if (o.showValues) cell.append(h('span', {class: 'cell-text'}, fmt(v, 2)));
      const mark = o.marks?.[i]?.[j];
      if (mark) cell.append(h('span', {class: 'mark'}, mark));
      if (o.flags?.[i]?.[j]) cell.append(h('span', {class: 'sig', title: 'interval excludes 0'}));
      grid.append(cell);
      row.push(cell);
    }
    cells.push(row);
  }
  let selected = null;
  const select = (sel) => {
    if (selected) selected.classList.remove('selected');
    selected = sel && cells[sel[0]] ? cells[sel[0]][sel[1]] || null : null;
    if (selected) selected.classList.add('selected');
  };
  select(o.selected);
  const cellOf = (target) => (target?.closest ? target.closest('.cell') : null);
  grid.addEventListener('mousemove', (e) => {
    const cell = cellOf(e.target);
    if (!cell) return hideTooltip();
    const i = Number(cell.dataset.layer);
    const j = Number(cell.dataset.head);
    const lines = o.tooltip ? o.tooltip(i, j, values[i][j]) : [headName(i, j), ['value', fmt(values[i][j])]];
    showTooltip(e, lines);
    if (o.onHover) o.onHover(i, j);
  });
  grid.addEventListener('mouseleave', () => hideTooltip());
  if (o.onClick) {
    grid.classList.add('clickable');
    grid.addEventListener('click', (e) => {
      const cell = cellOf(e.target);
      if (cell) o.onClick(Number(cell.dataset.layer), Number(cell.dataset.head));
    });
  }
  const el = h(
    'div',
    {class: 'heatmap', id: o.id || null},
    h('div', {class: 'hm-axis-x'}, 'head'),
    h('div', {class: 'hm-wrap'}, h('div', {class: 'hm-axis-y'}, 'layer'), grid),
  );
  return {el, select, cells};
}

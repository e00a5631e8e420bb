// Data access: relative URLs only (they resolve against <base href="plugin/bertwatch/">, so the plugin works
// under --path_prefix and /experiment/<id>/), and TensorBoard's JSON encoding of NaN/±Infinity as strings.

export class HttpError extends Error {
  constructor(status, text) {
    super(text || `HTTP ${status}`);
    this.status = status;
  }
}

export async function getJSON(route, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') query.set(k, String(v));
  }
  const qs = query.toString();
  const response = await fetch(`./${route}${qs ? `?${qs}` : ''}`, {headers: {Accept: 'application/json'}});
  if (!response.ok) {
    const text = (await response.text()).slice(0, 300);
    throw new HttpError(response.status, text);
  }
  return response.json();
}

/**
 * `run` (async) with at most one call in flight: a call made meanwhile runs it once more when it ends (the latest
 * state wins), and any further ones fold into that. The returned function's `pending()` says whether one is waiting.
 */
export function oneInFlight(run) {
  let busy = false;
  let again = false;
  const call = async () => {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        await run();
      } while (again);
    } finally {
      busy = false;
    }
  };
  call.pending = () => again;
  return call;
}

/** A number from TensorBoard's JSON: "NaN", "Infinity", "-Infinity" become the real values. */
export function num(v) {
  if (typeof v === 'number') return v;
  if (v === 'NaN') return NaN;
  if (v === 'Infinity') return Infinity;
  if (v === '-Infinity') return -Infinity;
  if (v === null || v === undefined) return NaN;
  return Number(v);
}

/** Recursively convert nested arrays of JSON numbers. */
export function nums(a) {
  return Array.isArray(a) ? a.map(nums) : num(a);
}

/** The text a value had in the JSON response (for data-value attributes): numbers print as JS prints them. */
export function rawText(v) {
  return typeof v === 'string' ? v : String(v);
}

// --- tags -----------------------------------------------------------------------------------------

// Statistic names and groups have one home, bertwatch/core/stat_names.py, served at /stat_names; index.js loads
// them once, before the first view renders.
const statNames = {groups: [], drift: [], proportions: [], per_layer: []};

/** Fetch the statistic names from the plugin (once, at start-up). */
export async function loadStatNames() {
  Object.assign(statNames, await getJSON('stat_names'));
}

/** Whether `stat` is a drift-from-pretrained statistic. */
export function isDriftStat(stat) {
  return statNames.drift.includes(stat);
}

/** Whether `stat` is a statistic of the whole layer, logged as a [layers, 1] grid (one column, no heads). */
export function isPerLayer(stat) {
  return (statNames.per_layer || []).includes(stat);
}

/** Whether `stat` is a share of attention, always in [0, 1]. */
export function isProportion(stat) {
  return statNames.proportions.includes(stat);
}

function statOrder(stat) {
  let i = 0;
  for (const [, stats] of statNames.groups) {
    const j = stats.indexOf(stat);
    if (j >= 0) return i + j;
    i += stats.length;
  }
  return 1000;
}

export function statGroup(stat) {
  for (const [group, stats] of statNames.groups) if (stats.includes(stat)) return group;
  return 'Other';
}

/** Head-grid tags of a run as [{tag, stat, ...info}], in the usual order of statistics. */
export function gridTags(tags, run) {
  const out = [];
  for (const [tag, info] of Object.entries(tags.runs?.[run] || {})) {
    if (info.kind === 'head_grid') out.push({tag, ...info});
  }
  return out.sort((a, b) => statOrder(a.stat) - statOrder(b.stat) || (a.stat < b.stat ? -1 : 1));
}

export function tagsOfKind(tags, run, kind) {
  return Object.entries(tags.runs?.[run] || {})
    .filter(([, info]) => info.kind === kind)
    .map(([tag, info]) => ({tag, ...info}));
}

/** The run verdict's series tag, and each verdict label's CSS class (grey "cannot tell": level 0 with no evidence
 * of learning). */
export const VERDICT_TAG = 'bertwatch/series/verdict';
export const VERDICT_CLASS = {
  healthy: 'healthy',
  'cannot tell': 'cannot-tell',
  'at risk': 'at-risk',
  failing: 'failing',
};

export function runsWithKind(tags, kind) {
  return Object.keys(tags.runs || {}).filter((run) => tagsOfKind(tags, run, kind).length > 0);
}

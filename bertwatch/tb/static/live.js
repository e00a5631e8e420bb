// Live updates. TensorBoard's reload never reaches an iframe plugin's data, so the page polls /tags itself
// (every ~3 s, paused while its tab is hidden: TensorBoard only styles the iframe `visibility: hidden`)
// and also answers TensorBoard's experimental IPC, refreshing on `experimental.DataReloaded` (the reload
// button, or TensorBoard's auto-reload when the user turned it on).

import {getJSON} from './api.js';

export const POLL_MS = 3000;

function isHidden() {
  if (document.hidden) return true;
  try {
    const frame = window.frameElement;
    if (frame && frame.style.visibility === 'hidden') return true;
  } catch {
    // cross-origin parent: only document.hidden is known
  }
  return false;
}

/** Signature of a /tags answer: changes whenever a tag appears or gets a new latest step. */
export function tagsSignature(tags) {
  const parts = [];
  for (const run of Object.keys(tags.runs || {})) {
    for (const [tag, info] of Object.entries(tags.runs[run]))
      parts.push(`${run}\u0000${tag}\u0000${info.maxStep}\u0000${info.maxWallTime}`);
  }
  return parts.join('\u0001');
}

/**
 * Start polling. onTags(tags, changed) gets every answer; onStatus({state, at, error}) drives the indicator.
 * Returns {refresh(), stats}.
 */
export function startLive({onTags, onStatus, initialTags}) {
  const stats = {polls: 0, ipcMessages: 0, dataReloaded: 0, pausedTicks: 0};
  let signature = initialTags ? tagsSignature(initialTags) : null;
  let timer = null;
  let inFlight = null;

  async function poll(force) {
    if (inFlight) return inFlight;
    inFlight = (async () => {
      try {
        const tags = await getJSON('tags');
        stats.polls += 1;
        const sig = tagsSignature(tags);
        const changed = sig !== signature;
        signature = sig;
        await onTags(tags, changed || !!force);
        onStatus({state: 'live', at: new Date()});
      } catch (error) {
        onStatus({state: 'error', at: new Date(), error});
      } finally {
        inFlight = null;
      }
    })();
    return inFlight;
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(tick, POLL_MS);
  }

  async function tick() {
    if (isHidden()) {
      stats.pausedTicks += 1;
      onStatus({state: 'paused', at: new Date()});
    } else {
      await poll(false);
    }
    schedule();
  }

  // Coming back from a hidden tab: catch up at once.
  document.addEventListener('visibilitychange', () => {
    if (!isHidden()) poll(false);
  });

  // TensorBoard host IPC (tensorboard/components/experimental/plugin_util): a MessageChannel handed to the
  // parent with 'experimental.bootstrap'; messages are JSON {type, id, payload, error, isReply}.
  try {
    if (window.parent && window.parent !== window) {
      const channel = new MessageChannel();
      channel.port1.onmessage = (event) => {
        let msg;
        try {
          msg = JSON.parse(event.data);
        } catch {
          return;
        }
        if (!msg || msg.isReply) return;
        stats.ipcMessages += 1;
        channel.port1.postMessage(
          JSON.stringify({type: msg.type, id: msg.id, payload: null, error: null, isReply: true}),
        );
        if (msg.type === 'experimental.DataReloaded') {
          stats.dataReloaded += 1;
          poll(true);
        }
      };
      channel.port1.start();
      window.parent.postMessage('experimental.bootstrap', window.location.origin, [channel.port2]);
    }
  } catch {
    // no host: polling alone
  }

  schedule();
  return {refresh: () => poll(true), stats, isHidden};
}

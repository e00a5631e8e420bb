// A card of the Heads view that shows one route's answer at the view's run and step, fetched lazily: a card out of
// view (scrolled away, another tab, or hidden for a run without its statistics) fetches nothing when the step
// moves and catches up when it comes into view; at most one request is in flight, and the latest step wins.

import {getJSON, oneInFlight} from './api.js';
import {card} from './dom.js';

function keyOf({run, step}) {
  return `${run}\0${step}`;
}

export class StepCard {
  /** title and id: the card's; route: the JSON route asked with {run, step}. A subclass gives pick(data): what of
   * the answer to draw, null for nothing (the card is then hidden), and render(picked). */
  constructor(title, id, route) {
    this.card = card(title, {class: 'chart-card'});
    this.card.el.id = id;
    this.card.el.hidden = true;
    this.el = this.card.el;
    this.route = route;
    this.want = null; // the run and step the view is at: {run, step}
    this.drawn = null; // what the card shows (or found nothing to show for): 'run\0step'
    this.known = null; // the run whose answer decided whether the card is shown
    this.onScreen = false;
    this.refresh = oneInFlight(async () => {
      if (this.want && keyOf(this.want) !== this.drawn) await this.load(this.want);
    });
    new IntersectionObserver((entries) => {
      this.onScreen = entries[entries.length - 1].isIntersecting;
      if (this.onScreen) this.refresh();
    }).observe(this.el);
  }

  /** The view is at `step` of `run`: fetched now when the card is on screen, or when only the answer can tell whether
   * the card is shown (a new run, or new data for a run whose card is hidden); otherwise when it comes into view. */
  follow(run, step) {
    this.want = {run, step};
    if (this.onScreen || this.known !== run) this.refresh();
  }

  /** New data was logged: the next `follow` fetches again, at once if the card is hidden (its data may have come). */
  invalidate() {
    this.drawn = null;
    if (this.el.hidden) this.known = null;
  }

  /** Show the answer of `run` at the step at or before `step`; hides the card when there is nothing to draw. */
  async load({run, step}) {
    const data = await getJSON(this.route, {run, step}).catch(() => null);
    if (run !== this.want.run) return;
    this.drawn = keyOf({run, step});
    this.known = run;
    const picked = data ? this.pick(data) : null;
    this.el.hidden = !picked;
    if (picked) this.render(picked);
  }
}

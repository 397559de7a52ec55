// Follow mode for a log panel (a file: the Content-Security-Policy allows no inline script).
//
// The polled panel ([data-log-panel]) is replaced by htmx every few seconds; its <pre data-log-box>
// starts scrolled to the top each time. Following ([data-log-follow] checked) keeps the newest
// line, at the bottom, in view after every swap. Scrolling up pauses following (the box unticks)
// and the reader's position is kept across swaps instead of snapping back; scrolling back to the
// bottom, or ticking the box, follows again.
(function () {
  "use strict";
  var PANEL = "[data-log-panel]", BOX = "[data-log-box]", FOLLOW = "[data-log-follow]", PICKER = "[data-log-picker]";
  var SLACK = 8; // pixels from the bottom that still count as "at the bottom"
  var before = null; // where the reader was in the panel being swapped: {top, atBottom}

  function box() { return document.querySelector(BOX); }
  function toggle() { return document.querySelector(FOLLOW); }
  function atBottom(el) { return el.scrollHeight - el.scrollTop - el.clientHeight <= SLACK; }
  function toBottom(el) { el.scrollTop = el.scrollHeight; }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || !target.matches || !target.matches(PANEL)) return;
    var old = target.querySelector(BOX);
    before = old ? { top: old.scrollTop, atBottom: atBottom(old) } : { top: 0, atBottom: true };
  });

  // Polls refresh the pod picker out of band (a retry's new attempt appears); never while the
  // reader has it open or focused, which would close it under their pointer.
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail.target;
    if (target && target.matches && target.matches(PICKER) && target.contains(document.activeElement)) {
      event.detail.shouldSwap = false;
    }
  });

  document.addEventListener("htmx:afterSwap", function () {
    if (before === null) return;
    var el = box(), follow = toggle();
    if (el) {
      if (follow && follow.checked && before.atBottom) toBottom(el);
      else el.scrollTop = before.top;
    }
    before = null;
  });

  // The reader scrolls: away from the bottom pauses following, back to it resumes.
  document.addEventListener("scroll", function (event) {
    var el = event.target, follow = toggle();
    if (!follow || !el.matches || !el.matches(BOX)) return;
    follow.checked = atBottom(el);
  }, true);

  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches(FOLLOW) && event.target.checked) {
      var el = box();
      if (el) toBottom(el);
    }
  });

  function start() {
    var el = box(), follow = toggle();
    if (el && follow && follow.checked) toBottom(el);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// Live parts of the dashboard's pages. An element with data-live-url is replaced by the
// "html" of that JSON route every data-live-seconds while the tab is visible; polling ends
// when the answer says "done" (a job that ended) or the session ended (401). Without
// JavaScript the pages still work: a Refresh link, or a reload while a job runs.
// While someone works inside a live part (a field has the focus, a box is ticked, a
// traceback is unfolded) it is left as it is, and updated at the next poll after that:
// ticked rows stay ticked, an open traceback stays open.
(function () {
  "use strict";

  function start(box) {
    var url = box.getAttribute("data-live-url");
    var seconds = Number(box.getAttribute("data-live-seconds")) || 5;
    var last = null;
    var stopped = false;
    var polls = 0;

    function schedule() {
      if (!stopped) {
        window.setTimeout(poll, seconds * 1000);
      }
    }

    function inUse() {
      var active = document.activeElement;
      var editing = active && box.contains(active) &&
        /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
      return editing || box.querySelector("input[type=checkbox]:checked, details[open]") !== null;
    }

    function apply(data) {
      if (!data || inUse()) {
        return;
      }
      if (typeof data.html === "string" && data.html !== last) {
        last = data.html;
        box.innerHTML = data.html;
      }
      if (data.done) {
        stopped = true;
        box.setAttribute("data-live-done", "1");
      }
    }

    function poll() {
      if (document.hidden) {
        schedule();
        return;
      }
      fetch(url, {credentials: "same-origin", cache: "no-store",
                  headers: {"Accept": "application/json"}})
        .then(function (resp) {
          if (resp.status === 401 || resp.status === 404) {
            stopped = true;
          }
          return resp.ok ? resp.json() : null;
        })
        .then(apply)
        .catch(function () { /* the next poll tries again */ })
        .then(function () {
          polls += 1;
          box.setAttribute("data-live-polls", String(polls));
          schedule();
        });
    }

    schedule();
  }

  // Ticking rows for a bulk action: the box in a list's header ticks or clears every row
  // of its list, and shows whether all are ticked. Without JavaScript that header box
  // still works: it carries the ids of every row of its page.
  function syncTicks(event) {
    var box = event.target;
    var table = box && box.closest ? box.closest("table") : null;
    if (!table || !box.classList) {
      return;
    }
    var rows = table.querySelectorAll("input.select-row");
    var all = table.querySelector("input.select-page");
    if (box.classList.contains("select-page")) {
      Array.prototype.forEach.call(rows, function (row) { row.checked = box.checked; });
    } else if (box.classList.contains("select-row") && all) {
      all.checked = Array.prototype.every.call(rows, function (row) { return row.checked; });
    }
  }

  document.addEventListener("change", syncTicks);

  document.addEventListener("DOMContentLoaded", function () {
    var boxes = document.querySelectorAll("[data-live-url]");
    if (!boxes.length) {
      return;
    }
    document.documentElement.classList.add("js-live");
    Array.prototype.forEach.call(document.querySelectorAll(".live-on"), function (el) {
      el.hidden = false;
    });
    Array.prototype.forEach.call(boxes, start);
  });
}());

// Live updates over server-sent events. The pages read fine without this
// script; it keeps them current without a reload.
(function () {
  "use strict";
  function setField(root, name, value) {
    var el = root.querySelector('[data-field="' + name + '"]');
    if (!el || value === undefined || value === null) return;
    var text = value === "" ? "—" : String(value);
    if (el.textContent !== text) el.textContent = text;
    if (name === "status") el.className = "status status-" + value;
  }
  function apply(root, data) {
    ["status", "phase", "outcome", "detail"].forEach(function (name) { setField(root, name, data[name]); });
  }
  // The run page follows the run in full: when its history grows, the page is
  // fetched again and every section (timeline, pull request, evidence, next
  // step...) is swapped in place, so nothing needs a reload. The actions form
  // is left alone while someone is typing a reason into it.
  function refreshSections() {
    return fetch(window.location.href, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live-section]").forEach(function (old) {
          var name = old.getAttribute("data-live-section");
          var now = fresh.querySelector('[data-live-section="' + name + '"]');
          if (!now) return;
          var typing = old.querySelector("input#reason");
          if (typing && (typing.value || document.activeElement === typing)) return;
          if (old.innerHTML !== now.innerHTML) old.innerHTML = now.innerHTML;
          old.hidden = now.hidden;
        });
      })
      .catch(function () { /* the next event tries again */ });
  }
  var run = document.querySelector("[data-live-run]");
  if (run && window.EventSource) {
    var source = new EventSource(run.getAttribute("data-live-run"));
    var seenLength = null;
    source.addEventListener("run", function (event) {
      var data = JSON.parse(event.data);
      apply(document.querySelector("[data-live-run]") || run, data);
      var grew = seenLength !== null && data.history_length !== seenLength;
      seenLength = data.history_length;
      if (grew || data.closed) {
        refreshSections().then(function () {
          if (data.closed) {
            var note = document.querySelector('[data-field="live-note"]');
            if (note) {
              note.hidden = false;
              note.textContent = "The run has ended; this page shows its final state.";
            }
          }
        });
      }
      if (data.closed) source.close();
    });
  }
  var list = document.querySelector("[data-live-list]");
  if (list && window.EventSource) {
    var ids = Array.prototype.map.call(list.querySelectorAll("tr[data-run]"), function (tr) {
      return tr.getAttribute("data-run");
    });
    if (ids.length) {
      var url = list.getAttribute("data-live-list") + "?" + ids.map(function (id) {
        return "run=" + encodeURIComponent(id);
      }).join("&");
      var stream = new EventSource(url);
      stream.addEventListener("run", function (event) {
        var data = JSON.parse(event.data);
        list.querySelectorAll("tr[data-run]").forEach(function (tr) {
          if (tr.getAttribute("data-run") === data.run_id) apply(tr, data);
        });
      });
    }
  }
})();

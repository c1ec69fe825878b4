// Live updates over server-sent events. The pages read fine without this
// script; it only keeps the status, phase and outcome fields current.
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
  var run = document.querySelector("[data-live-run]");
  if (run && window.EventSource) {
    var source = new EventSource(run.getAttribute("data-live-run"));
    source.addEventListener("run", function (event) {
      var data = JSON.parse(event.data);
      apply(run, data);
      if (data.closed) {
        var note = run.querySelector('[data-field="live-note"]');
        note.hidden = false;
        note.textContent = "The run has ended; reload for its final evidence and history.";
        source.close();
      }
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

// Live updates for a running run: the server sends each new step as HTML it rendered and escaped itself
// (server-sent events); this only appends it to the timeline. No framework, no build step.
(function () {
  "use strict";
  var timeline = document.getElementById("timeline");
  if (!timeline || !timeline.dataset.events || !window.EventSource) return;
  var source = new EventSource(timeline.dataset.events);
  var count = document.getElementById("step-count");

  source.addEventListener("step", function (event) {
    var data = JSON.parse(event.data);
    if (document.getElementById("step-" + data.id)) return; // already shown (a reconnect)
    timeline.insertAdjacentHTML("beforeend", data.html);
    if (count) count.textContent = "(" + timeline.children.length + ")";
  });

  source.addEventListener("end", function (event) {
    var data = JSON.parse(event.data);
    source.close();
    var badge = document.getElementById("run-status");
    if (badge) {
      badge.textContent = data.stop_reason || data.status;
      badge.className = "badge s-" + String(data.stop_reason || data.status).toLowerCase();
    }
    var note = document.getElementById("live-note");
    if (note) {
      note.textContent = "The run ended (" + (data.stop_reason || data.status) + "). ";
      var link = document.createElement("a");
      link.href = window.location.pathname;
      link.textContent = "Reload for its summary.";
      note.appendChild(link);
    }
  });
})();

/* The dashboard's (and the admin's) small behaviours, all progressive: without this file every
   page still works. A static file, not inline: the Content-Security-Policy allows no inline
   script.
   - [data-copy]: a one-time secret (the element, or the <code> in it) gets a Copy button
     under it; the attribute's value names the button.
   - .table-wrap (the admin's .results too): marked .scrolls while its table is wider than it
     (the CSS then shows a cue);
     a table.cards gets its header's words on each cell, for the phone's card layout. */
(function () {
  "use strict";

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain http (a trial without TLS): the clipboard API is not offered there.
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    var done = document.execCommand("copy");
    document.body.removeChild(area);
    return done ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function addCopyButtons() {
    document.querySelectorAll("[data-copy]").forEach(function (holder) {
      var secret = holder.matches("code") ? holder : holder.querySelector("code");
      if (!secret) return;
      var button = document.createElement("button");
      var status = document.createElement("span");
      button.type = "button";
      button.className = "copy";
      button.textContent = "Copy";
      button.setAttribute("aria-label", holder.getAttribute("data-copy") || "Copy");
      status.className = "copy-status";
      status.setAttribute("role", "status");
      button.addEventListener("click", function () {
        copyText(secret.textContent.trim()).then(
          function () { status.textContent = "Copied"; },
          function () { status.textContent = "Select it and copy it by hand"; }
        );
      });
      var row = document.createElement("p");
      row.className = "copy-row";
      row.appendChild(button);
      row.appendChild(status);
      secret.insertAdjacentElement("afterend", row);
    });
  }

  function labelCards() {
    document.querySelectorAll("table.cards").forEach(function (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      table.querySelectorAll("tbody tr").forEach(function (tr) {
        Array.prototype.forEach.call(tr.children, function (cell, i) {
          if (heads[i] && !cell.hasAttribute("colspan")) cell.setAttribute("data-label", heads[i]);
        });
      });
      table.classList.add("labelled");
    });
  }

  function markScrolling() {
    document.querySelectorAll(".table-wrap, #changelist-form .results").forEach(function (wrap) {
      wrap.classList.toggle("scrolls", wrap.scrollWidth > wrap.clientWidth + 1);
    });
  }

  function start() {
    addCopyButtons();
    labelCards();
    markScrolling();
    window.addEventListener("resize", markScrolling);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

// Small behaviours of the portal, as a file: the Content-Security-Policy allows no inline script.
// What the pages' own scripts share (loaded before them: base.html's order, all deferred).
window.Slipway = window.Slipway || {};

// A chart's legend (uPlot's values under the cursor) is a table: like every table of the portal it
// scrolls in its own box rather than widening a phone's page.
window.Slipway.scrollable = function (table) {
  if (!table || table.parentElement.classList.contains("table-scroll")) { return; }
  var wrap = document.createElement("div");
  wrap.className = "table-scroll";
  table.parentElement.insertBefore(wrap, table);
  wrap.appendChild(table);
};

// A <select data-autosubmit> submits its form when it changes (the team switcher).
document.addEventListener("change", function (event) {
  var target = event.target;
  if (target.matches && target.matches("select[data-autosubmit]") && target.form) {
    target.form.submit();
  }
});

// A "This field is required." under a field goes once the field has a value again: the error
// was about the form as it was sent, and a filled field under it reads as still wrong. Other
// errors stay until the form is sent again (only the server can say they are fixed).
document.addEventListener("input", clearRequiredError);
document.addEventListener("change", clearRequiredError);
function clearRequiredError(event) {
  var input = event.target;
  var field = input.closest && input.closest(".field.has-error");
  if (!field) { return; }
  var filled = input.type === "checkbox" ? input.checked : String(input.value || "").trim() !== "";
  if (!filled) { return; }
  field.querySelectorAll(".errorlist li[data-required]").forEach(function (item) { item.remove(); });
  var list = field.querySelector(".errorlist");
  if (list && !list.querySelector("li")) {
    list.remove();
    field.classList.remove("has-error");
  }
}

// A <button data-copy="ID"> copies the text of the element #ID (an endpoint's URL, a snippet) and says so.
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest("button[data-copy]");
  if (!button) { return; }
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source || !navigator.clipboard) { return; }
  navigator.clipboard.writeText(source.textContent).then(function () {
    var label = button.textContent;
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = label; }, 1500);
  });
});

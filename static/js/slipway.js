// Small behaviours of the portal, as a file: the Content-Security-Policy allows no inline script.
// A <select data-autosubmit> submits its form when it changes (the team switcher).
document.addEventListener("change", function (event) {
  var target = event.target;
  if (target.matches && target.matches("select[data-autosubmit]") && target.form) {
    target.form.submit();
  }
});

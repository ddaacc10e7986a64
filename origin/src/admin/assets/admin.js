// The admin console's only script: asks before a form marked
// data-confirm is sent. The console works without it.
document.addEventListener("submit", function (e) {
  var f = e.target;
  var q = f && f.getAttribute && f.getAttribute("data-confirm");
  if (q && !window.confirm(q)) {
    e.preventDefault();
  }
});

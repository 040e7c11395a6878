// Accessibility repairs of what the theme, the bibliography and the widget
// library draw (loaded on every page: _config.yml, html_js_files). Each repair
// answers one rule of the accessibility check (tests/browser/axe.py):
// - aria-input-field-name: the ipywidgets slider draws its handle as a div with
//   role="slider" that its text label does not name; each handle is named after
//   its widget's label.
// - scrollable-region-focusable: an Explore widget whose results scroll inside
//   their box cannot be scrolled from the keyboard; such a box becomes focusable.
// - aria-required-children: the bibliography's list (role="list") holds entries
//   whose role is not listitem; the entries are given that role.
// The widgets are drawn after the page loads, so the repairs run again whenever
// the page changes.
(function () {
  function repair(root) {
    root.querySelectorAll('.widget-slider, .widget-hslider, .widget-vslider').forEach(function (w) {
      var text = w.querySelector('.widget-label');
      var name = text ? text.textContent.trim() : '';
      w.querySelectorAll('[role="slider"]').forEach(function (handle) {
        if (name && !handle.getAttribute('aria-label')) handle.setAttribute('aria-label', name);
      });
    });
    root.querySelectorAll('.widget-box').forEach(function (box) {
      var style = getComputedStyle(box);
      var scrolls = /(auto|scroll)/.test(style.overflowX + ' ' + style.overflowY) &&
        (box.scrollHeight > box.clientHeight || box.scrollWidth > box.clientWidth);
      if (scrolls && !box.hasAttribute('tabindex')) box.setAttribute('tabindex', '0');
    });
    root.querySelectorAll('.citation-list[role="list"] > .citation').forEach(function (entry) {
      entry.setAttribute('role', 'listitem');
    });
  }
  var pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () { pending = false; repair(document); });
  }
  function start() {
    repair(document);
    new MutationObserver(schedule).observe(document.body, { childList: true, subtree: true });
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();

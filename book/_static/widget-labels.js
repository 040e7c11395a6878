// Accessible names for the Explore widgets of the static book (registered by
// book/_ext/offline_assets.py on pages with widgets). The ipywidgets slider draws
// its handle as a div with role="slider" that its text label does not name, so
// a screen reader announces an unnamed slider (axe: aria-input-field-name).
// Each handle is named after its widget's label, once the widgets are drawn.
(function () {
  function label(root) {
    root.querySelectorAll('.widget-slider, .widget-hslider, .widget-vslider').forEach(function (w) {
      var text = w.querySelector('.widget-label');
      var name = text ? text.textContent.trim() : '';
      w.querySelectorAll('[role="slider"]').forEach(function (handle) {
        if (name && !handle.getAttribute('aria-label')) handle.setAttribute('aria-label', name);
      });
    });
  }
  function start() {
    label(document);
    new MutationObserver(function () { label(document); }).observe(document.body, { childList: true, subtree: true });
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();

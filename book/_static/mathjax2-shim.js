/* ipywidgets' html-manager 1.x typesets widget labels with MathJax 2's
 * `MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])`. This book loads
 * MathJax 3, which has no `Hub`; we add a tiny one that forwards to MathJax 3's
 * `typesetPromise`. It is installed on `load`, after MathJax 3 (loaded async)
 * has replaced its configuration object and before the widget manager renders. */
(function () {
  function install() {
    var mj = window.MathJax;
    if (!mj || mj.Hub || typeof mj.typesetPromise !== "function") {
      return;
    }
    mj.Hub = {
      Queue: function (job) {
        var el = job && job[2];
        if (el) {
          window.MathJax.typesetPromise([el]).catch(function () {});
        }
      },
    };
  }
  install();
  window.addEventListener("load", install);
})();

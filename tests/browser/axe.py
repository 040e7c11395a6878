"""Accessibility of a page by axe-core: the violations ``test_layout.py`` asserts a page has none of.

axe-core (``make assets`` fetches it from npm into ``book/_vendor/axe``, outside the site, never
committed) is injected into each page after it has settled, and runs in the page. Only the
violations axe rates **critical** or **serious** fail a page (missing alternative text, unlabelled
controls, contrast below WCAG AA, ...); minor and moderate ones are left to the authors.

Each page is checked in light and dark mode at each width ``test_layout.py`` opens (1280 and
390 px), with the rules that configuration can change (the colour rules cost about four fifths
of axe's time on a chapter page, 3-5 s a run):

* 1280 px, light mode: every rule of axe's default set;
* 1280 px, dark mode (the theme's ``data-theme="dark"``): the rules that read colours,
  :data:`COLOUR_RULES`. Switching the theme changes colours and nothing else of the page,
  so every other rule gives the same result as in light mode;
* 390 px, light and dark: every rule but the colour rules, which run on the page header only
  (:data:`PHONE_ONLY`, where the phone layout shows controls that 1280 px does not). The article's
  colours are the same at both widths.
"""

from __future__ import annotations

from pathlib import Path

from tests.browser.common import ROOT

AXE = ROOT / "book" / "_vendor" / "axe" / "axe.min.js"
#: The impacts that fail a page.
FAILING = ("critical", "serious")
#: axe's rules whose result depends on colours (all that dark mode can change).
COLOUR_RULES = ["color-contrast", "link-in-text-block"]
#: What the phone layout draws that the desktop layout does not: the header with its menu buttons.
PHONE_ONLY = ".bd-header"

_JS_RUN = """async ([only, skip, context]) => {
  const options = {resultTypes: ['violations']};
  if (only) options.runOnly = {type: 'rule', values: only};
  if (skip) options.rules = Object.fromEntries(skip.map(r => [r, {enabled: false}]));
  const target = context ? (document.querySelector(context) ? context : null) : document;
  if (!target) return [];
  const result = await axe.run(target, options);
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ')), count: v.nodes.length}));
}"""

# Switch the theme's mode with CSS transitions turned off: axe reads the colours at once, and a
# colour still fading between the two modes is neither mode's.
_JS_MODE = """(mode) => {
  if (!document.getElementById('axe-no-transitions')) {
    const style = document.createElement('style');
    style.id = 'axe-no-transitions';
    style.textContent = '*, *::before, *::after { transition: none !important; }';
    document.head.appendChild(style);
  }
  document.documentElement.dataset.theme = mode;
  document.documentElement.dataset.mode = mode;
  return getComputedStyle(document.body).backgroundColor;
}"""


def axe_available() -> bool:
    return Path(AXE).is_file()


def violations(
    page, only: list[str] | None = None, skip: list[str] | None = None, context: str | None = None
) -> list[str]:
    """axe's critical and serious violations on ``page`` as it is now (``only``: these rules; ``skip``:
    all but these; ``context``: within the first element this selector finds, if any):
    ``"<rule> (<impact>, N elements: <first targets>): <help>"``."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found = page.evaluate(_JS_RUN, [only, skip, context])
    return [
        f"{v['id']} ({v['impact']}, {v['count']} elements: {', '.join(v['nodes'])}): {v['help']}"
        for v in found
        if v["impact"] in FAILING
    ]


def accessibility_problems(page, phone: bool = False) -> list[str]:
    """The failing violations in light mode, then in dark mode, with the rules of the module docstring for
    the desktop (``phone=False``) or the phone width; the page is left in light mode."""
    page.evaluate(_JS_MODE, "light")
    if phone:
        problems = [f"light: {v}" for v in violations(page, skip=COLOUR_RULES)]
        problems += [f"light: {v}" for v in violations(page, COLOUR_RULES, context=PHONE_ONLY)]
    else:
        problems = [f"light: {v}" for v in violations(page)]
    page.evaluate(_JS_MODE, "dark")
    problems += [f"dark: {v}" for v in violations(page, COLOUR_RULES, context=PHONE_ONLY if phone else None)]
    page.evaluate(_JS_MODE, "light")
    return problems

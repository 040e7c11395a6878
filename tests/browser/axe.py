"""Accessibility of a page by axe-core: the violations ``test_pages.py`` asserts a page has none of.

axe-core (``make assets`` fetches it from npm into ``book/_vendor/axe``, outside the site, never
committed) is injected into each page after it has settled, and runs in the page. Only the
violations axe rates **critical** or **serious** fail a page (missing alternative text, unlabelled
controls, contrast below WCAG AA, ...); minor and moderate ones are left to the authors.

Each page is checked at each width ``test_pages.py`` opens (1280 and 390 px)
(:func:`accessibility_problems`):

* light mode: every rule of axe's default set, the colour rules (:data:`COLOUR_RULES`) on one
  element of each *style* the session has not met yet, the others on the whole page
  (:func:`violations`). A violation has its rule's impact, even where the failing check is rated
  higher (``test_pages.py`` plants the three rules of axe 4.11 for which that is so), so the rules rated
  minor or moderate (``region``, ``heading-order``, the landmark rules, ...) cannot fail a page and are
  not run;
* dark mode (the theme's ``data-theme="dark"``): the colour rules, the same way. Switching the
  theme changes colours and nothing else of the page, so every other rule gives the same result
  as in light mode.

**Why one element per style is enough.** The colour rules cost about four fifths of axe's time on
a chapter page (3-5 s a run, about 2 ms per element); most of it went to the thousands of code
tokens and the sidebar's links, which repeat a few dozen combinations of colours on every page.
``colour_styles.js`` computes, for every element the rules may look at, a string of everything
they read of it, its *style*. Neither rule applies to text that has no box (not laid out; form
fields aside) or to a link that is not shown, so each rule gives those one style and reads nothing
else of them. For color-contrast (every other element with text of its own, and form
fields): whether it is shown, its own text as axe reads it (punctuation only, one character,
symbols only), whether the overflow or ``clip`` of its ancestors hides that text and on which
sides, its colours (text, fill, stroke, shadow), font size and weight, the opacity, filters,
blending and clipping of it and its ancestors, the backgrounds under it up to the first opaque
one with those of their boxes that do not hold its text (axe's own test), and the
``::before``/``::after`` boxes above them. For link-in-text-block (every link shown): whether it has text and sits in
a block of text (axe's own test), and of the link and of that block, the same colours,
backgrounds and effects plus what tells the two apart without colour (display, font, decoration,
borders, outline, background image, pseudo-content). Two elements of one style get the same
result (checked below), with one exception: axe may leave an element undecided (incomplete) where
its grid of the page puts another element's box over it (on the catalog page a wide formula's box
lies over a few code names in the next column), which the style does not describe. So each run marks the
first element of every style that the session (``seen``, which the page tests keep for their whole
module) has not met, and axe's colour rules run on the marked elements only (their selectors
changed by ``axe.configure``, restored by ``axe.reset``); where that element comes back
undecided, a second run checks every other element of its style on the page. A run fails if a
checked element fails, naming how many elements of the page share its style; the style then
counts as met. A style met in light mode, in dark mode, on another page or at the other width is
not checked again: the run that met it has reported it.

``test_pages.py`` checks what this relies on, on the book's heaviest page in light and in dark
mode: run on every element, the colour rules give the elements of a style one outcome (a
violation or a pass with the same computed colours, or not applicable), undecided ones aside
(:func:`colour_outcomes_by_style`). Fixture pages show that a low-contrast style is reported when
it repeats many times, when it appears only in dark mode, on a later page when it is new there,
and when axe cannot judge its first element. Should that check fail after a change of the theme
or of axe, add what separates the two outcomes to the style.
"""

from __future__ import annotations

from pathlib import Path

from tests.browser.common import ROOT

AXE = ROOT / "book" / "_vendor" / "axe" / "axe.min.js"
#: The script that computes the style of each element the colour rules apply to (see above).
STYLES = Path(__file__).with_name("colour_styles.js")
#: The impacts that fail a page.
FAILING = ("critical", "serious")
#: axe's rules whose result depends on colours (all that dark mode can change).
COLOUR_RULES = ["color-contrast", "link-in-text-block"]

# One run of axe: every rule of its default set that can fail a page (everyRule: a rule's violations have
# the rule's impact, so one rated minor or moderate never does) or the colour rules only, the colour rules
# on the marked elements only (each marked with the number of elements of its style): their selectors
# are changed for the run, and axe.reset() gives them back. axe fetches every stylesheet again to build
# its own CSS object model (preload 'cssom') for css-orientation-lock, an experimental rule it does not
# run by default; it resolves the theme's @import "basic.css" against the page rather than the
# stylesheet, and the failed request would fail test_pages' request check. So only audio and video are
# preloaded (for no-autoplay-audio).
_JS_RUN = """async ([everyRule, colourRules, failing]) => {
  const {CONTRAST, LINK} = bookColourStyles;
  // axe's rule objects are not a public interface (axe-core is pinned by scripts/fetch_assets.sh)
  if (!axe._audit || !axe._audit.rules.some(r => r.id === 'color-contrast' && r.impact === 'serious'))
    throw new Error(`axe ${axe.version}: cannot read its rules' impacts`);
  const rules = everyRule ? axe._audit.rules.filter(r => r.enabled && !r.tags.includes('experimental')
                                                         && (!r.impact || failing.includes(r.impact))).map(r => r.id)
                          : colourRules;
  const options = {runOnly: {type: 'rule', values: rules}, elementRef: true, resultTypes: ['violations', 'incomplete'],
                   preload: everyRule ? {assets: ['media']} : false};
  axe.configure({rules: [{id: 'color-contrast', selector: `[${CONTRAST}]`},
                         {id: 'link-in-text-block', selector: `[${LINK}]`}]});
  let result;
  try {
    result = await axe.run(document, options);
  } finally {
    axe.reset();
  }
  const attribute = (id) => (id === 'color-contrast' ? CONTRAST : LINK);
  const undecided = result.incomplete.filter(r => colourRules.includes(r.id))
    .flatMap(r => r.nodes.map(n => [n.element, attribute(r.id)]));
  const shared = (v) => v.nodes.reduce((sum, n) => sum + Number(n.element.getAttribute(attribute(v.id))), 0);
  return {
    violations: result.violations.map(v => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ')), count: v.nodes.length,
      shared: colourRules.includes(v.id) ? shared(v) : null})),
    undecided: bookColourStyles.styleOf(undecided)};
}"""

# The colour rules on every element: for each style, how many of its elements had each outcome. A pass or
# a violation comes with the colours axe computed (text, background, contrast ratio) or why it judged so.
_JS_OUTCOMES = """async (rules) => {
  const {CONTRAST, LINK} = bookColourStyles;
  const result = await axe.run(document, {runOnly: {type: 'rule', values: rules}, elementRef: true, preload: false});
  const outcome = new Map();
  for (const kind of ['violations', 'passes', 'incomplete'])
    for (const r of result[kind]) for (const n of r.nodes) {
      const data = Object.assign({}, ...[...n.any, ...n.all, ...n.none].map(c => c.data || {}));
      const said = kind === 'incomplete' ? '' : ' ' + JSON.stringify(data);
      outcome.set(n.element, {...outcome.get(n.element), [r.id]: kind + said});
    }
  const rule = {[CONTRAST]: 'color-contrast', [LINK]: 'link-in-text-block'};
  const groups = {};
  for (const [e, attribute, style] of bookColourStyles.styles()) {
    const kind = (outcome.get(e) || {})[rule[attribute]] || 'inapplicable';
    groups[style] = groups[style] || {};
    groups[style][kind] = (groups[style][kind] || 0) + 1;
  }
  return groups;
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


def _load(page) -> None:
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    if not page.evaluate("() => typeof window.bookColourStyles !== 'undefined'"):
        page.add_script_tag(path=str(STYLES))


def violations(page, seen: set[str], every_rule: bool = True) -> list[str]:
    """axe's critical and serious violations on ``page`` as it is now, by every rule of its default set that
    can fail a page (``every_rule``) or by the colour rules only, the colour rules on one element of each
    style of the page not in ``seen``, and on all of them where axe cannot judge that one (see the module
    docstring; the styles checked are added to ``seen`` once the run is done):
    ``"<rule> (<impact>, N elements[ checked, standing for M of the same styles]: <first targets>): <help>"``."""
    _load(page)
    fresh = page.evaluate("(seen) => bookColourStyles.mark(seen)", sorted(seen))
    try:
        run = page.evaluate(_JS_RUN, [every_rule, COLOUR_RULES, FAILING]) if fresh or every_rule else None
        found = run["violations"] if run else []
        if run and run["undecided"]:
            page.evaluate("(styles) => bookColourStyles.markTheRest(styles)", run["undecided"])
            found += page.evaluate(_JS_RUN, [False, COLOUR_RULES, FAILING])["violations"]
    finally:
        page.evaluate("() => bookColourStyles.unmark()")
    seen.update(fresh)
    return [
        f"{v['id']} ({v['impact']}, {v['count']} elements"
        + (f" checked, standing for {v['shared']} of the same styles" if v["shared"] is not None else "")
        + f": {', '.join(v['nodes'])}): {v['help']}"
        for v in found
        if v["impact"] in FAILING
    ]


def colour_outcomes_by_style(page) -> dict[str, dict[str, int]]:
    """The colour rules on every element of ``page``: for each style, how many of its elements had each
    outcome (``violations`` or ``passes`` with the colours axe computed, ``incomplete``, ``inapplicable``).
    :func:`violations` relies on one outcome per style, ``incomplete`` aside."""
    _load(page)
    return page.evaluate(_JS_OUTCOMES, COLOUR_RULES)


def set_mode(page, mode: str) -> None:
    """Switch the theme to ``"light"`` or ``"dark"`` (transitions off)."""
    page.evaluate(_JS_MODE, mode)


def accessibility_problems(page, seen: set[str] | None = None) -> list[str]:
    """The failing violations in light mode (every rule), then in dark mode (the colour rules), the colour
    rules on the styles not in ``seen`` (those earlier pages of the session have checked; none if not
    given); the page is left in light mode."""
    seen = set() if seen is None else seen
    set_mode(page, "light")
    problems = [f"light: {v}" for v in violations(page, seen)]
    set_mode(page, "dark")
    problems += [f"dark: {v}" for v in violations(page, seen, every_rule=False)]
    set_mode(page, "light")
    return problems

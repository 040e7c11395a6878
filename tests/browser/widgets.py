"""Check every embedded widget on a page: drawn, and each of its controls changes what it shows.

myst-nb writes a ``widget-view+json`` <script> for every widget output, but the
``widget-state+json`` <script> (and the html-manager that draws from it) only
when the notebook was saved with widget state; html-manager draws a view only
if its model is in that state, into a ``div.widget-subarea`` it inserts just
before the view's <script>. So the views are what must be checked, each on its
own: a page whose state is missing, or one of whose widgets is not drawn or
has no control of its own that changes it, fails (:func:`widget_problems`).

Used by ``test_pages.py`` (every page of the book) and ``test_widgets_static.py``
(a tiny fixture page, and copies of it broken on purpose). Waits are on events
and DOM conditions, never fixed sleeps; timeouts are generous because CI
machines may be loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

WAIT_MS = 60_000

VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]'
STATE = 'script[type="application/vnd.jupyter.widget-state+json"]'

# Roots: the element html-manager drew each view into (the div.widget-subarea just
# before the view's <script>), or null where it drew nothing. What a root shows:
# the text and image sources of its visible output elements (an <img> inside an HTML widget included) (offsetParent is null
# for hidden ones, e.g. the Stack's other children), the controls themselves excluded.
_JS_ROOT_OF = """(s => {
    const d = s.previousElementSibling;
    return d && d.classList.contains('widget-subarea') && d.querySelector('.jupyter-widgets') ? d : null;
})"""
_JS_ROOTS = f"""() => Array.from(document.querySelectorAll('{VIEW}')).map({_JS_ROOT_OF})"""
_JS_ALL_DRAWN = f"""() => Array.from(document.querySelectorAll('{VIEW}')).every({_JS_ROOT_OF})"""
_JS_UNDRAWN = f"""() => Array.from(document.querySelectorAll('{VIEW}'))
    .map((s, i) => [i, s]).filter(([i, s]) => !{_JS_ROOT_OF}(s))
    .map(([i, s]) => `widget ${{i}} (model ${{JSON.parse(s.textContent).model_id}})`)"""


@dataclass
class Move:
    """One control moved: which widget on the page, which control, and whether the output changed."""

    widget: int
    control: str
    changed: bool
    detail: str = ""


def roots(page):
    """One handle per widget view, in page order: the element it was drawn into, or null."""
    return page.evaluate_handle(_JS_ROOTS).get_properties()


_JS_SHOWN = """Array.from(root.querySelectorAll('.widget-html, .widget-html img, .widget-image, .widget-output, pre'))
    .filter(e => e.offsetParent !== null && !e.closest('.widget-slider, .widget-dropdown'))
    .map(e => (e.innerText || '') + (e.src ? e.src.length + ':' + e.src.slice(-80) : '')).join('||')"""


def _visible_output(page, root) -> str:
    return page.evaluate(f"(root) => {_JS_SHOWN}", root)


def _wait_changed(page, root, before: str, timeout: int) -> bool:
    try:
        page.wait_for_function(
            f"([root, before]) => ({_JS_SHOWN}) !== before",
            arg=[root, before],
            timeout=timeout,
        )
        return True
    except Exception:  # playwright TimeoutError
        return False


def move_every_control(page, timeout: int = WAIT_MS) -> list[Move]:
    """Move each slider (keyboard) and dropdown (select_option) of each drawn widget once;
    report whether that widget's output changed. A widget not drawn gets no Move."""
    moves: list[Move] = []
    for index, handle in roots(page).items():
        w, root = int(index), handle.as_element()
        if root is None:
            continue
        sliders = root.query_selector_all(".widget-slider .noUi-handle")
        selects = root.query_selector_all(".widget-dropdown select")
        for i, knob in enumerate(sliders):
            before = _visible_output(page, root)
            now, top = knob.get_attribute("aria-valuenow"), knob.get_attribute("aria-valuemax")
            key = "ArrowLeft" if now is not None and now == top else "ArrowRight"
            knob.focus()
            knob.press(key)
            moves.append(Move(w, f"slider {i} ({key})", _wait_changed(page, root, before, timeout), f"{now}/{top}"))
        for i, sel in enumerate(selects):
            before = _visible_output(page, root)
            options = sel.eval_on_selector_all("option", "os => os.map(o => o.value)")
            current = sel.evaluate("s => s.value")
            others = [o for o in options if o != current]
            if not others:
                moves.append(Move(w, f"dropdown {i}", False, "only one option"))
                continue
            sel.select_option(others[0])
            moves.append(
                Move(w, f"dropdown {i}", _wait_changed(page, root, before, timeout), f"{current} -> {others[0]}")
            )
    return moves


def widget_problems(page, draw_timeout: int = WAIT_MS) -> list[str]:
    """Everything wrong with the page's widgets (none if it has no widget view): no widget
    state, a view not drawn within ``draw_timeout`` ms, a widget without a slider or
    dropdown of its own, a control that changes nothing its widget shows."""
    views = page.locator(VIEW).count()
    if not views:
        return []
    if not page.locator(STATE).count():
        return [f"{views} widget views but no widget state (the notebook was saved without it): nothing is drawn"]
    try:
        page.wait_for_function(_JS_ALL_DRAWN, timeout=draw_timeout)
    except Exception:  # playwright TimeoutError: the views not drawn are reported
        return [f"not drawn after {draw_timeout / 1000:.0f} s: {page.evaluate(_JS_UNDRAWN)}"]
    moves = move_every_control(page)
    moved = {m.widget for m in moves}
    problems = [f"widget {w} has no slider or dropdown to move" for w in range(views) if w not in moved]
    problems += [f"widget {m.widget} {m.control} changes nothing it shows [{m.detail}]" for m in moves if not m.changed]
    return problems

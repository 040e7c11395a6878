"""Move every control of every embedded widget on a page and see what it shows.

Used by ``test_site.py`` (every page of the book) and ``test_widgets_static.py``
(a tiny fixture page). Waits are on events and DOM conditions, never fixed
sleeps; timeouts are generous because CI machines may be loaded (issue 10).
"""

from __future__ import annotations

from dataclasses import dataclass

WAIT_MS = 60_000

# Roots: the element html-manager renders each stored view into (the parent of
# the widget-view <script>). What it shows: the text and image sources of its
# visible output elements (offsetParent is null for hidden ones, e.g. the
# Stack's other children), the controls themselves excluded.
_JS_ROOTS = """() => Array.from(document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]')).map(s => s.parentElement)"""


@dataclass
class Move:
    """One control moved: which widget on the page, which control, and whether the output changed."""

    widget: int
    control: str
    changed: bool
    detail: str = ""


def roots(page):
    return page.evaluate_handle(_JS_ROOTS).get_properties()


_JS_SHOWN = """Array.from(root.querySelectorAll('.widget-html, .widget-image, .widget-output, pre'))
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
    """Move each slider (keyboard) and dropdown (select_option) once; report whether the output changed."""
    moves: list[Move] = []
    for w, (_, handle) in enumerate(roots(page).items()):
        root = handle.as_element()
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

// What axe-core's colour rules read of an element, as one string per element: its "style" (see axe.py).
//
// Two elements of the same style get the same result from the rule, so it needs to run on one of them
// only. color-contrast does not apply to an element whose text has no box (not laid out), unless it
// is a form field, nor link-in-text-block to a link that is not shown: those share one style per rule
// ('text | no text box', 'link | hidden'), and nothing else of them is read. Of the others,
// color-contrast reads whether the element is shown, its own text (punctuation only? one character?
// symbols only?) and where the overflow or clip of its ancestors hides that text, its colours (text,
// fill, stroke, shadow), font size and weight, the ::before/::after boxes of it and its ancestors, the
// opacity, filters, blending and clipping of it and its ancestors, and the backgrounds under it up to
// the first opaque one, with those of their boxes that do not hold its text. link-in-text-block reads
// whether the link has text and sits in a block of text (axe's own test), and, of the link and of that
// block, the same colours and backgrounds plus what can tell the two apart without colour (display,
// font, decoration, borders, outline, background image, pseudo-content).
//
// Defines window.bookColourStyles: mark(seen) marks the first element of each style not in `seen` for
// its rule (data-axe-contrast, data-axe-link: the number of elements of the page with that style) and
// returns those styles; styleOf(checked) gives the styles of the marked ones among `checked`;
// markTheRest(styles) marks the other elements of those styles instead; unmark() removes the marks;
// styles() lists [element, attribute, style] for every element either rule may look at. Needs
// axe-core loaded first.
window.bookColourStyles = (() => {
  const CONTRAST = 'data-axe-contrast';
  const LINK = 'data-axe-link';
  const LINKS = 'a[href], [role=link]';
  const FIELDS = ['INPUT', 'SELECT', 'TEXTAREA'];

  // A function of an element, computed once per element and per call of styles(), and reused by its
  // descendants: f(e, up) may call up(e.parentElement).
  // (f never returns undefined.)
  const memo = (f) => {
    const known = new Map();
    const g = (e) => {
      if (!e) return f(null, g);
      let value = known.get(e);
      if (value === undefined) known.set(e, (value = f(e, g)));
      return value;
    };
    return g;
  };

  // How axe reads an element's own text (every text node joined, white space collapsed): no letters,
  // symbols only, one character or text. A function of the text alone, so kept for the page's life.
  const kinds = new Map();
  function kindOfText(raw) {
    let kind = kinds.get(raw);
    if (kind === undefined) {
      const T = axe.commons.text;
      const own = T.sanitize(raw);
      const letters = T.removeUnicode(own, {emoji: true, nonBmp: false, punctuations: true}) !== ''; // codespell:ignore (axe's option name)
      const symbols = T.hasUnicode(own, {nonBmp: true}) && T.sanitize(T.removeUnicode(own, {nonBmp: true})) === '';
      kind = !letters ? 'no letters' : symbols ? 'symbols only' : own.length === 1 ? 'one character' : 'text';
      kinds.set(raw, kind);
    }
    return kind;
  }

  // Whether a link sits in a block of text, by axe's own test, which needs axe's tree of the page. It
  // reads the page's structure and the display of the elements around the link, which the light and
  // dark modes share, so it is kept for the page's life.
  const inBlock = new WeakMap();
  function inTextBlock(e) {
    if (!inBlock.has(e)) {
      axe.setup(document);
      try {
        for (const link of document.querySelectorAll(LINKS)) inBlock.set(link, axe.commons.dom.isInTextBlock(link));
      } finally {
        axe.teardown();
      }
    }
    return inBlock.get(e);
  }

  function styles() {
    const css = memo((e) => getComputedStyle(e));
    const transparent = (c) => c === 'transparent' || /, 0\)$/.test(c);
    // e's background, read once: its colour, whether it has an image, whether it is inline, whether
    // there is none (clear) and whether it hides what lies under it (opaque).
    const paint = memo((e) => {
      const s = css(e);
      const colour = s.backgroundColor;
      const image = s.backgroundImage !== 'none';
      return {colour, image, inline: s.display === 'inline', clear: !image && transparent(colour),
        opaque: !image && colour.startsWith('rgb(')};
    });
    // The largest box drawn by an absolutely positioned ::before/::after with a background, on e or above.
    const pseudoArea = memo((e, up) => {
      if (!e) return 0;
      let area = 0;
      for (const which of ['::before', '::after']) {
        const s = getComputedStyle(e, which);
        if (s.content === 'none' || s.display === 'none' || s.visibility === 'hidden' || s.position !== 'absolute') continue;
        if (transparent(s.backgroundColor) && s.backgroundImage === 'none') continue;
        area += s.width.endsWith('px') && s.height.endsWith('px') ? parseFloat(s.width) * parseFloat(s.height) : Infinity;
      }
      return Math.max(area, up(e.parentElement));
    });
    // Opacity, filters, blending and clipping of e and its ancestors (only what differs from the default).
    const effects = memo((e, up) => {
      if (!e) return '';
      const s = css(e);
      const own = [s.opacity !== '1' ? `opacity ${s.opacity}` : '', s.filter !== 'none' ? `filter ${s.filter}` : '',
        s.mixBlendMode !== 'normal' ? `blend ${s.mixBlendMode}` : '', s.clip !== 'auto' ? `clip ${s.clip}` : '',
        s.clipPath !== 'none' ? `clip-path ${s.clipPath}` : ''].filter(Boolean).join(' ');
      return (own ? own + ' < ' : '') + up(e.parentElement);
    });
    // The backgrounds under e: its own and its ancestors' up to the first opaque one (inline or box).
    const backgrounds = memo((e, up) => {
      if (!e) return '';
      const p = paint(e);
      const own = p.clear ? '' : `${p.colour}${p.image ? ' image' : ''}${p.inline ? ' inline' : ''} < `;
      return p.opaque ? own : own + up(e.parentElement);
    });
    const meet = (a, b) => (!a ? b : !b ? a : {left: Math.max(a.left, b.left), top: Math.max(a.top, b.top),
      right: Math.min(a.right, b.right), bottom: Math.min(a.bottom, b.bottom)});
    // The box that the overflow and `clip: rect(...)` of e's ancestors clip it to (null: none does).
    const clipBox = memo((e, up) => {
      const p = e && e.parentElement;
      if (!p) return null;
      const s = css(p);
      let box = up(p);
      if (s.overflowX !== 'visible' || s.overflowY !== 'visible') box = meet(box, p.getBoundingClientRect());
      const rect = /^rect\((.*)\)$/.exec(s.clip);
      if (rect && ['absolute', 'fixed'].includes(s.position)) {
        const r = p.getBoundingClientRect();
        const [top, right, bottom, left] = rect[1].split(/,?\s+/).map((v) => (v === 'auto' ? null : parseFloat(v)));
        box = meet(box, {left: r.left + (left ?? 0), top: r.top + (top ?? 0),
          right: right === null ? r.right : r.left + right, bottom: bottom === null ? r.bottom : r.top + bottom});
      }
      return box;
    });
    const shown = (e) => e.checkVisibility({visibilityProperty: true});
    // The boxes of the text of the given text nodes.
    const textRects = (nodes) => {
      const range = document.createRange();
      return nodes.flatMap((n) => { range.selectNodeContents(n); return Array.from(range.getClientRects()); });
    };
    // Whether e's own text lies inside, across or outside the box its ancestors clip it to, and on which
    // sides it crosses that box (axe's own test of whether a background box holds the text stretches a
    // scrolling box to the right and down only).
    const placed = (e, rects) => {
      if (!rects.length) return 'no text box';
      const c = clipBox(e);
      if (!c) return 'unclipped';
      const outside = rects.filter((r) => r.right <= c.left || r.left >= c.right || r.bottom <= c.top || r.top >= c.bottom);
      const sides = [rects.some((r) => r.top < c.top) ? 'top' : '', rects.some((r) => r.left < c.left) ? 'left' : '',
        rects.some((r) => r.bottom > c.bottom) ? 'bottom' : '', rects.some((r) => r.right > c.right) ? 'right' : ''];
      const crossed = sides.filter(Boolean).join(' ');
      return !crossed ? 'inside' : `${outside.length === rects.length ? 'clipped away' : 'partly clipped'} (${crossed})`;
    };
    // The box b covers in axe's test of whether it holds a text: a box that scrolls (overflow auto or
    // scroll) reaches as far right and down as it scrolls.
    const reach = memo((b) => {
      const s = css(b);
      const r = b.getBoundingClientRect();
      const scrolls = ['scroll', 'auto'].includes(s.overflow) || b === document.documentElement;
      const pad = (a, z) => parseInt(s[a], 10) + parseInt(s[z], 10);
      return {left: r.left, top: r.top,
        right: scrolls ? r.left + b.scrollWidth + pad('paddingLeft', 'paddingRight') : r.right,
        bottom: scrolls ? r.top + b.scrollHeight + pad('paddingTop', 'paddingBottom') : r.bottom};
    });
    // Which of the boxes with a background under e (up to the first opaque one) do not hold its text, by
    // axe's test.
    const unheld = (e, rects) => {
      const out = [];
      for (let b = e; b && rects.length; b = b.parentElement) {
        const p = paint(b);
        if (p.clear) continue;
        if (!p.inline) {
          const r = reach(b);
          if (!rects.every((t) => t.top >= r.top && t.bottom <= r.bottom && t.left >= r.left && t.right <= r.right)) {
            out.push(b.tagName);
          }
        }
        if (p.opaque) break;
      }
      return out.length ? `outside ${out.join(' < ')}` : '';
    };
    const colours = (s) => [s.color, s.webkitTextFillColor, s.webkitTextStrokeWidth, s.webkitTextStrokeColor, s.textShadow];
    // What tells a link apart from the text around it, besides colour.
    const looks = (e, s) => [s.display, s.fontFamily, s.fontSize, s.fontWeight, s.fontStyle, s.textDecoration,
      s.textDecorationThickness, s.borderTop, s.borderBottom, s.borderLeft, s.borderRight, s.outline,
      s.backgroundImage, s.boxShadow, getComputedStyle(e, '::before').content, getComputedStyle(e, '::after').content];
    const block = (e) => {
      let b = e.parentElement;
      while (b && !['block', 'list-item', 'table', 'flex', 'grid', 'inline-block'].includes(css(b).display)
             && !css(b).display.startsWith('table-')) b = b.parentElement;
      return b;
    };

    // The area of e's box (read only where a pseudo-element's box could cover a quarter of it).
    const area = (e) => { const box = e.getBoundingClientRect(); return box.width * box.height; };
    const text = (e, raw, rects) => {
      const s = css(e);
      const pseudo = pseudoArea(e);
      return ['text', e.tagName, shown(e) ? 'shown' : 'hidden', placed(e, rects), ...colours(s), s.fontSize,
        s.fontWeight, kindOfText(raw), pseudo > 0 && pseudo > area(e) * 0.25 ? 'pseudo-element' : '', effects(e), backgrounds(e),
        unheld(e, rects)].join(' | ');
    };
    const link = (e) => {
      const b = block(e);
      const around = b ? [b.tagName, ...colours(css(b)), ...looks(b, css(b)), effects(b), backgrounds(b)] : ['no block'];
      return ['link', e.tagName, e.getAttribute('role') || '', e.innerText.trim() ? 'text' : 'no text',
        inTextBlock(e) ? 'in a text block' : 'alone', ...colours(css(e)), ...looks(e, css(e)), effects(e),
        backgrounds(e), 'in', ...around].join(' | ');
    };

    const found = [];
    for (const e of document.querySelectorAll('*')) {
      // its text nodes (those with more than white space) and all their text
      const nodes = [];
      let raw = '';
      for (let n = e.firstChild; n; n = n.nextSibling) {
        if (n.nodeType !== 3) continue;
        raw += n.nodeValue;
        if (n.nodeValue.trim()) nodes.push(n);
      }
      // color-contrast applies to a form field, or to an element whose text has a box (axe's test),
      // link-in-text-block to a link that is shown
      const field = FIELDS.includes(e.tagName);
      if (nodes.length || field) {
        const rects = textRects(nodes);
        found.push([e, CONTRAST, rects.length || field ? text(e, raw, rects) : 'text | no text box']);
      }
      if (e.matches(LINKS)) found.push([e, LINK, shown(e) ? link(e) : 'link | hidden']);
    }
    return found;
  }

  // The page's elements of each style, from the last mark().
  let members = new Map();

  function mark(seen) {
    seen = new Set(seen);
    members = new Map();
    for (const [e, attribute, style] of styles()) {
      if (!members.has(style)) members.set(style, []);
      members.get(style).push([e, attribute]);
    }
    const fresh = Array.from(members.keys()).filter((style) => !seen.has(style));
    for (const style of fresh) {
      const [e, attribute] = members.get(style)[0];
      e.setAttribute(attribute, String(members.get(style).length));
    }
    return fresh;
  }

  // The styles of the marked elements among `checked` ([element, attribute] pairs).
  function styleOf(checked) {
    const found = new Set();
    for (const [style, list] of members) {
      if (list.some(([e, a]) => e.hasAttribute(a) && checked.some(([c, ca]) => c === e && ca === a))) found.add(style);
    }
    return Array.from(found);
  }

  // Mark every element of the given styles but the first (which has been checked), each for itself.
  function markTheRest(stylesToCheck) {
    unmark();
    for (const style of stylesToCheck) {
      for (const [e, attribute] of members.get(style).slice(1)) e.setAttribute(attribute, '1');
    }
  }

  function unmark() {
    for (const attribute of [CONTRAST, LINK]) {
      document.querySelectorAll(`[${attribute}]`).forEach((e) => e.removeAttribute(attribute));
    }
  }

  return {styles, mark, styleOf, markTheRest, unmark, CONTRAST, LINK};
})();

#!/usr/bin/env bash
# Fetch MathJax 3 and the ipywidgets embed bundle from the npm registry into
# book/_vendor/site/vendor (ignored by git). Without npm the book still builds
# and uses CDN copies (book/_ext/offline_assets.py says so).
# reveal.js (for `make slides`, scripts/slides.py) goes to book/_vendor/slides,
# outside the site, and so does axe-core (book/_vendor/axe), which only the accessibility test
# (tests/browser/test_pages.py, by tests/browser/axe.py) injects into the pages it checks.
set -euo pipefail
cd "$(dirname "$0")/.."
MATHJAX_VERSION=3.2.2
HTML_MANAGER_VERSION=1.0.15
REVEAL_VERSION=5.2.1
AXE_VERSION=4.11.4
axe=book/_vendor/axe
slides=book/_vendor/slides
dest=book/_vendor/site/vendor
stamp="$dest/.versions"
want="mathjax@$MATHJAX_VERSION html-manager@$HTML_MANAGER_VERSION reveal.js@$REVEAL_VERSION axe-core@$AXE_VERSION"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "assets: already present ($want)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "assets: npm not found; the book will load MathJax and widgets from CDNs" >&2
  exit 0
fi
work=book/_vendor/npm
mkdir -p "$work"
npm install --prefix "$work" --no-save --no-audit --no-fund --ignore-scripts --loglevel=error \
  "mathjax@$MATHJAX_VERSION" "@jupyter-widgets/html-manager@$HTML_MANAGER_VERSION" "reveal.js@$REVEAL_VERSION" "axe-core@$AXE_VERSION"
rm -rf "$dest"
mkdir -p "$dest/html-manager"
cp -r "$work/node_modules/mathjax/es5" "$dest/mathjax"
cp -r "$work/node_modules/@jupyter-widgets/html-manager/dist/." "$dest/html-manager/"
rm -f "$dest/html-manager/"*.map
rm -rf "$slides"
mkdir -p "$slides/reveal.js/plugin"
cp -r "$work/node_modules/reveal.js/dist" "$slides/reveal.js/dist"
cp -r "$work/node_modules/reveal.js/plugin/notes" "$slides/reveal.js/plugin/notes"
cp "$work/node_modules/reveal.js/LICENSE" "$slides/reveal.js/"
rm -rf "$axe"
mkdir -p "$axe"
cp "$work/node_modules/axe-core/axe.min.js" "$work/node_modules/axe-core/LICENSE" "$axe/"
echo "$want" > "$stamp"
echo "assets: installed $want into $dest"
